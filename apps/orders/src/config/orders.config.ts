import { resolve } from 'node:path';
import { Inject, type LogLevel } from '@nestjs/common';
import { getConfigToken } from '@nestjs/config';
import type { IdempotencyEncryptionOptions } from 'nestjs-idempotency';
import { redactUrl } from './redact-url.js';
import { parseEncryptionKeys } from './encryption-keys.js';
import {
  type EnvironmentVariables,
  LOG_LEVELS_BY_SEVERITY,
  OrdersConfigError,
  type OrdersEnvironment,
  readOrdersEnvironment,
} from './orders.environment.js';

/**
 * The typed configuration of the orders service, one namespace per concern. `ConfigModule`
 * registers each namespace with `registerAs` (see `loadOrdersConfig`): a class reads one with
 * `@InjectOrdersConfig('queue')`, a factory that needs several injects `ConfigService<OrdersConfig, true>`
 * and reads `config.get('queue', { infer: true })`.
 */
export interface OrdersConfig {
  http: {
    /** TCP port; `0` picks a free one. @default 3000 */
    port: number;
    /** Interface to listen on. @default '0.0.0.0' */
    host: string;
  };
  log: {
    /** Lowest level that is logged. @default 'log' */
    level: LogLevel;
  };
  database: DatabaseConfig;
  fastStore: FastStoreConfig;
  queue: QueueConfig;
  outbox: {
    /** How often the outbox is scanned for events not handed to the queue yet, in ms. @default 5_000 */
    pollMs: number;
    /** How long a dispatched outbox event is kept before the cleanup deletes it, in ms. @default 86_400_000 (a day) */
    retentionMs: number;
    /** How often dispatched outbox events past their retention are deleted (in batches), in ms. @default 60_000 */
    cleanupIntervalMs: number;
  };
  webhooks: {
    /** Shared secret of the payment provider's webhook signatures; unset: `POST /webhooks/payments` answers 503. */
    secret: string | undefined;
  };
  admin: {
    /** Bearer token of the `/admin/idempotency` routes; unset: the routes do not exist (404). */
    token: string | undefined;
  };
  idempotency: {
    /** Lease of an idempotency claim, in ms (heartbeat every third of it). @default 30_000 */
    leaseMs: number;
    /** Key ring sealing stored idempotency responses (first key active); unset: stored in clear. */
    encryption: IdempotencyEncryptionOptions | undefined;
  };
  problems: {
    /** Base URI of every problem `type` (RFC 9457); ends with `/`. @default 'https://api.example.com/problems/' */
    typeBaseUri: string;
  };
}

/** The name of one namespace of {@link OrdersConfig}. */
export type OrdersConfigNamespace = keyof OrdersConfig;

/** Every namespace, in the order `ConfigModule` registers them. */
export const ORDERS_CONFIG_NAMESPACES = [
  'http',
  'log',
  'database',
  'fastStore',
  'queue',
  'outbox',
  'webhooks',
  'admin',
  'idempotency',
  'problems',
] as const satisfies readonly OrdersConfigNamespace[];

/**
 * Injects one namespace: `@InjectOrdersConfig('admin') admin: OrdersConfig['admin']`. The token is
 * the one `registerAs('admin', ...)` registers (`getConfigToken('admin')`).
 */
export const InjectOrdersConfig = (namespace: OrdersConfigNamespace): PropertyDecorator & ParameterDecorator =>
  Inject(getConfigToken(namespace));

/** Where the orders, items and payments live. */
export type DatabaseConfig =
  | {
      kind: 'postgres';
      /** `postgres://` or `postgresql://` connection URL, as given. */
      url: string;
      /** Schema that holds every table; created at startup when absent. @default 'public' */
      schema: string;
      /**
       * The idempotency table partitioned by creation time, partitions this many ms wide
       * (`IDEMPOTENCY_PARTITION_MS`); undefined: the default table. @default undefined
       */
      idempotencyPartitionMs?: number;
    }
  | {
      kind: 'mysql';
      /** `mysql://` or `mariadb://` connection URL, as given; its path names the database that holds every table. */
      url: string;
    }
  | {
      kind: 'embedded';
      /** Absolute path of the sql.js database file (created on first start). */
      file: string;
    };

/** The fast store the idempotency layer will use. */
export type FastStoreConfig = { kind: 'redis'; url: string } | { kind: 'memory' };

/**
 * The `order-events` queue: BullMQ on the Redis of `REDIS_URL`, or RabbitMQ when `RABBITMQ_URL`
 * is set. Without either there is no queue: events are processed in-process right after their
 * transaction commits.
 */
export interface QueueConfig {
  /** Whether this process consumes the queue (a BullMQ or RabbitMQ consumer); producers always enqueue. @default true */
  worker: boolean;
  /** BullMQ's key prefix in Redis. @default 'bull' */
  prefix: string;
  /** How long a worker's lock on a job lasts without renewal (BullMQ `lockDuration`), in ms. @default 30_000 */
  lockMs: number;
  /** How often workers look for jobs whose worker died (BullMQ `stalledInterval`), in ms. @default 30_000 */
  stalledIntervalMs: number;
  /** RabbitMQ for `order.created`; unset: BullMQ with `REDIS_URL`, in-process without. */
  rabbitmq: RabbitMqConfig | undefined;
}

/** The queue `order.created` goes through when `RABBITMQ_QUEUE` is not set. */
export const DEFAULT_RABBITMQ_QUEUE = 'order-events';

/**
 * RabbitMQ, when `RABBITMQ_URL` is set: the outbox relay publishes `order.created` there (instead
 * of BullMQ), with the idempotency key of the request that created the order in the
 * `idempotency-key` header, and the service consumes the queue (unless `QUEUE_WORKER=false`).
 */
export interface RabbitMqConfig {
  /** `amqp://` or `amqps://` connection URL, as given. */
  url: string;
  /** The queue of `order.created`; its retry and dead-letter queues are named after it. @default 'order-events' */
  queue: string;
}

/**
 * Validates `variables` with the class-validator schema and maps them to the namespaces
 * (`DATA_DIR` resolved against `cwd`). Throws {@link OrdersConfigError} listing every bad value.
 */
export function validateOrdersEnvironment(variables: EnvironmentVariables, cwd: string = process.cwd()): OrdersConfig {
  const { environment: env, problems } = readOrdersEnvironment(variables);
  const encryption = parseEncryptionKeys(env.IDEMPOTENCY_ENCRYPTION_KEYS, problems);
  if (problems.length > 0) {
    throw new OrdersConfigError(problems);
  }
  return {
    http: { port: Number(env.PORT), host: env.HOST },
    log: { level: env.LOG_LEVEL as LogLevel },
    database: databaseOf(env, cwd),
    fastStore: env.REDIS_URL !== undefined ? { kind: 'redis', url: env.REDIS_URL } : { kind: 'memory' },
    queue: {
      worker: env.QUEUE_WORKER === 'true',
      prefix: env.QUEUE_PREFIX,
      lockMs: Number(env.QUEUE_LOCK_MS),
      stalledIntervalMs: Number(env.QUEUE_STALLED_INTERVAL_MS),
      rabbitmq:
        env.RABBITMQ_URL !== undefined
          ? { url: env.RABBITMQ_URL, queue: env.RABBITMQ_QUEUE ?? DEFAULT_RABBITMQ_QUEUE }
          : undefined,
    },
    outbox: {
      pollMs: Number(env.OUTBOX_POLL_MS),
      retentionMs: Number(env.OUTBOX_RETENTION_MS),
      cleanupIntervalMs: Number(env.OUTBOX_CLEANUP_INTERVAL_MS),
    },
    webhooks: { secret: env.WEBHOOK_SECRET },
    admin: { token: env.ADMIN_TOKEN },
    idempotency: { leaseMs: Number(env.IDEMPOTENCY_LEASE_MS), encryption },
    problems: { typeBaseUri: env.PROBLEM_TYPE_BASE_URI },
  };
}

function databaseOf(env: OrdersEnvironment, cwd: string): DatabaseConfig {
  if (env.DATABASE_URL === undefined) return { kind: 'embedded', file: resolve(cwd, env.DATA_DIR, 'orders.sqlite') };
  return /^(mysql|mariadb):/.test(env.DATABASE_URL)
    ? { kind: 'mysql', url: env.DATABASE_URL }
    : {
        kind: 'postgres',
        url: env.DATABASE_URL,
        schema: env.DATABASE_SCHEMA ?? 'public',
        ...(env.IDEMPOTENCY_PARTITION_MS !== undefined && {
          idempotencyPartitionMs: Number(env.IDEMPOTENCY_PARTITION_MS),
        }),
      };
}

/** The levels Nest should print for a minimum level: `warn` → fatal, error, warn. */
export function logLevelsFrom(minimum: LogLevel): LogLevel[] {
  return LOG_LEVELS_BY_SEVERITY.slice(0, LOG_LEVELS_BY_SEVERITY.indexOf(minimum) + 1);
}

/** The one startup line that says which backends are in use (no passwords). */
export function describeBackends(config: Pick<OrdersConfig, 'database' | 'fastStore' | 'queue'>): string {
  const db =
    config.database.kind === 'postgres'
      ? `PostgreSQL ${redactUrl(config.database.url)} (schema "${config.database.schema}")`
      : config.database.kind === 'mysql'
        ? `MySQL / MariaDB ${redactUrl(config.database.url)}`
        : `embedded sql.js file ${config.database.file}`;
  const store =
    config.fastStore.kind === 'redis' ? `Redis ${redactUrl(config.fastStore.url)}` : 'in-memory (this process only)';
  const { rabbitmq } = config.queue;
  const events = rabbitmq ? `; events = RabbitMQ ${redactUrl(rabbitmq.url)} (queue "${rabbitmq.queue}")` : '';
  return `Backends: database = ${db}; fast store = ${store}${events}`;
}
