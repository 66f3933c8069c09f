import type { LogLevel } from '@nestjs/common';
import { Expose, plainToInstance, Transform } from 'class-transformer';
import { IsIn, IsOptional, Matches, MinLength, validateSync, type ValidationArguments } from 'class-validator';
import { IsBaseUri, IsIntegerString, IsUrlWithScheme, Requires, RequiresScheme } from './env-constraints.js';

/** The variables the service reads: `process.env`, or any object in tests. */
export type EnvironmentVariables = Record<string, string | undefined>;

/** Nest's log levels, from the most to the least severe. */
export const LOG_LEVELS_BY_SEVERITY: readonly LogLevel[] = ['fatal', 'error', 'warn', 'log', 'debug', 'verbose'];

const lowerCase = ({ value }: { value: string }): string => value.toLowerCase();
const got = ({ value }: ValidationArguments): string => `(got "${String(value)}")`;

/**
 * The schema of the environment (class-validator): one property per variable, named as the
 * variable, holding its trimmed text. A property's initializer is its default; a property
 * without one is unset unless the variable is. apps/orders/README.md ("Configuration") documents
 * each of them. Messages never quote a secret.
 */
export class OrdersEnvironment {
  @Expose() @IsIntegerString(0, 65535) PORT = '3000';
  @Expose() HOST = '0.0.0.0';

  @Expose() @IsOptional() @IsUrlWithScheme(['postgres', 'postgresql', 'mysql', 'mariadb']) DATABASE_URL?: string;
  /** PostgreSQL only: on MySQL / MariaDB the database in `DATABASE_URL` holds the tables. */
  @Expose()
  @IsOptional()
  @Requires('DATABASE_URL', ': the embedded database has no schemas')
  @RequiresScheme('DATABASE_URL', ['postgres', 'postgresql'], ': MySQL has no schemas inside a database')
  @Matches(/^[a-z_][a-z0-9_]{0,62}$/, {
    message: (args) => `DATABASE_SCHEMA must be a lower-case SQL identifier of at most 63 characters ${got(args)}`,
  })
  DATABASE_SCHEMA?: string;
  /** Resolved against the working directory; only without `DATABASE_URL`. */
  @Expose() DATA_DIR = '.data';

  @Expose() @IsOptional() @IsUrlWithScheme(['redis', 'rediss']) REDIS_URL?: string;

  @Expose()
  @IsOptional()
  @MinLength(16, { message: 'WEBHOOK_SECRET must be at least 16 characters long' })
  WEBHOOK_SECRET?: string;
  @Expose()
  @IsOptional()
  @Matches(/^[\x21-\x7e]{32,}$/, {
    message: 'ADMIN_TOKEN must be at least 32 printable ASCII characters without spaces',
  })
  ADMIN_TOKEN?: string;

  @Expose()
  @Transform(lowerCase)
  @IsIn(LOG_LEVELS_BY_SEVERITY, {
    message: (args) => `LOG_LEVEL must be one of ${LOG_LEVELS_BY_SEVERITY.join(', ')} ${got(args)}`,
  })
  LOG_LEVEL = 'log';
  @Expose() @IsBaseUri() PROBLEM_TYPE_BASE_URI = 'https://api.example.com/problems/';

  @Expose() @IsIntegerString(300, 3_600_000) IDEMPOTENCY_LEASE_MS = '30000';
  @Expose()
  @IsOptional()
  @Requires('DATABASE_URL', ': the embedded database has no partitions')
  @IsIntegerString(1_000, 604_800_000)
  IDEMPOTENCY_PARTITION_MS?: string;
  /** `id:base64` entries; parsed by `parseEncryptionKeys`, which class-validator cannot express. */
  @Expose() IDEMPOTENCY_ENCRYPTION_KEYS?: string;

  @Expose()
  @Transform(lowerCase)
  @IsIn(['true', 'false'], { message: (args) => `QUEUE_WORKER must be true or false ${got(args)}` })
  QUEUE_WORKER = 'true';
  @Expose()
  @Matches(/^[A-Za-z0-9_.:-]{1,64}$/, {
    message: (args) => `QUEUE_PREFIX must be 1 to 64 letters, digits or _ . : - ${got(args)}`,
  })
  QUEUE_PREFIX = 'bull';
  @Expose() @IsIntegerString(200, 600_000) QUEUE_LOCK_MS = '30000';
  @Expose() @IsIntegerString(100, 600_000) QUEUE_STALLED_INTERVAL_MS = '30000';

  @Expose() @IsIntegerString(100, 600_000) OUTBOX_POLL_MS = '5000';
  @Expose() @IsIntegerString(0, 999_999_999) OUTBOX_RETENTION_MS = '86400000';
  @Expose() @IsIntegerString(100, 86_400_000) OUTBOX_CLEANUP_INTERVAL_MS = '60000';

  @Expose() @IsOptional() @IsUrlWithScheme(['amqp', 'amqps']) RABBITMQ_URL?: string;
  @Expose()
  @IsOptional()
  @Requires('RABBITMQ_URL')
  @Matches(/^[A-Za-z0-9_.:-]{1,200}$/, {
    message: (args) => `RABBITMQ_QUEUE must be 1 to 200 letters, digits or _ . : - ${got(args)}`,
  })
  RABBITMQ_QUEUE?: string;
}

/**
 * The `validate` step of `ConfigModule.forRoot`: reads `variables` into {@link OrdersEnvironment}
 * (blank values count as unset) and returns it with the problems class-validator found, every
 * one of them (an empty list when the environment is valid).
 */
export function readOrdersEnvironment(variables: EnvironmentVariables): {
  environment: OrdersEnvironment;
  problems: string[];
} {
  const set = Object.entries(variables).flatMap(([name, value]) =>
    value === undefined || value.trim() === '' ? [] : [[name, value.trim()]],
  );
  const environment = plainToInstance(OrdersEnvironment, Object.fromEntries(set), {
    excludeExtraneousValues: true,
    exposeDefaultValues: true,
  });
  const problems = validateSync(environment).flatMap((error) => Object.values(error.constraints ?? {}));
  return { environment, problems };
}

/** Thrown when the environment holds invalid values; the message lists every one of them. */
export class OrdersConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(
      `Invalid configuration of the orders service:\n${problems.map((p) => `  - ${p}`).join('\n')}\n` +
        'Fix these environment variables (see apps/orders/README.md, "Configuration") and start again.',
    );
    this.name = this.constructor.name;
  }
}
