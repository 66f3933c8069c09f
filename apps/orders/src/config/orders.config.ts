import { resolve } from 'node:path';
import type { LogLevel } from '@nestjs/common';
import type { IdempotencyEncryptionOptions } from 'nestjs-idempotency';
import { parseEncryptionKeys } from './encryption-keys.js';

/**
 * The one place that reads the environment. Everything else receives an {@link OrdersConfig}
 * (the `ORDERS_CONFIG` provider), so tests can boot the app with any configuration without
 * touching `process.env`.
 */

/** DI token of the validated {@link OrdersConfig}. */
export const ORDERS_CONFIG = Symbol('ORDERS_CONFIG');

/** Where the orders, items and payments live. */
export type DatabaseConfig =
  | {
      kind: 'postgres';
      /** `postgres://` or `postgresql://` connection URL, as given. */
      url: string;
      /** Schema that holds every table; created at startup when absent. @default 'public' */
      schema: string;
    }
  | {
      kind: 'embedded';
      /** Absolute path of the sql.js database file (created on first start). */
      file: string;
    };

/** The fast store the idempotency layer will use. */
export type FastStoreConfig = { kind: 'redis'; url: string } | { kind: 'memory' };

/**
 * The `order-events` queue (BullMQ, on the Redis of `REDIS_URL`). Without `REDIS_URL` there is
 * no queue: events are processed in-process right after their transaction commits.
 */
export interface QueueConfig {
  /** Whether this process consumes the queue (a BullMQ worker); producers always enqueue. @default true */
  worker: boolean;
  /** BullMQ's key prefix in Redis. @default 'bull' */
  prefix: string;
  /** How long a worker's lock on a job lasts without renewal (BullMQ `lockDuration`), in ms. @default 30_000 */
  lockMs: number;
  /** How often workers look for jobs whose worker died (BullMQ `stalledInterval`), in ms. @default 30_000 */
  stalledIntervalMs: number;
}

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

/** The validated configuration of the orders service. */
export interface OrdersConfig {
  /** TCP port; `0` picks a free one. @default 3000 */
  port: number;
  /** Interface to listen on. @default '0.0.0.0' */
  host: string;
  database: DatabaseConfig;
  fastStore: FastStoreConfig;
  /** Shared secret of the payment provider's webhook signatures; unset: `POST /webhooks/payments` answers 503. */
  webhookSecret: string | undefined;
  queue: QueueConfig;
  /** How often the outbox is scanned for events not handed to the queue yet, in ms. @default 5_000 */
  outboxPollMs: number;
  /** How long a dispatched outbox event is kept before the cleanup deletes it, in ms. @default 86_400_000 (a day) */
  outboxRetentionMs: number;
  /** How often dispatched outbox events past their retention are deleted (in batches), in ms. @default 60_000 */
  outboxCleanupIntervalMs: number;
  /** RabbitMQ for `order.created`; unset: BullMQ with `REDIS_URL`, in-process without. */
  rabbitmq: RabbitMqConfig | undefined;
  /** Lowest level that is logged. @default 'log' */
  logLevel: LogLevel;
  /** Base URI of every problem `type` (RFC 9457); ends with `/`. @default 'https://api.example.com/problems/' */
  problemTypeBaseUri: string;
  /** Lease of an idempotency claim, in ms (heartbeat every third of it). @default 30_000 */
  idempotencyLeaseMs: number;
  /** Key ring sealing stored idempotency responses (first key active); unset: stored in clear. */
  idempotencyEncryption: IdempotencyEncryptionOptions | undefined;
  /** Bearer token of the `/admin/idempotency` routes; unset: the routes do not exist (404). */
  adminToken: string | undefined;
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

export const DEFAULT_PORT = 3000;
export const DEFAULT_PROBLEM_TYPE_BASE_URI = 'https://api.example.com/problems/';
export const DEFAULT_IDEMPOTENCY_LEASE_MS = 30_000;
export const DEFAULT_QUEUE_LOCK_MS = 30_000;
export const DEFAULT_QUEUE_STALLED_INTERVAL_MS = 30_000;
export const DEFAULT_OUTBOX_POLL_MS = 5_000;
export const DEFAULT_OUTBOX_RETENTION_MS = 86_400_000;
export const DEFAULT_OUTBOX_CLEANUP_INTERVAL_MS = 60_000;
export const DEFAULT_RABBITMQ_QUEUE = 'order-events';
/** Nest's log levels, from the most to the least severe. */
export const LOG_LEVELS_BY_SEVERITY: readonly LogLevel[] = ['fatal', 'error', 'warn', 'log', 'debug', 'verbose'];
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
const MIN_WEBHOOK_SECRET_LENGTH = 16;
const MIN_ADMIN_TOKEN_LENGTH = 32;

/**
 * Reads and validates the configuration from `env` (pure: no I/O but resolving `DATA_DIR`
 * against `cwd`). Throws {@link OrdersConfigError} listing every bad value at once.
 */
export function parseOrdersConfig(env: NodeJS.ProcessEnv, cwd: string = process.cwd()): OrdersConfig {
  const problems: string[] = [];
  const value = (name: string): string | undefined => {
    const raw = env[name];
    return raw === undefined || raw.trim() === '' ? undefined : raw.trim();
  };

  const port = parsePort(value('PORT'), problems);
  const host = value('HOST') ?? '0.0.0.0';

  const databaseUrl = value('DATABASE_URL');
  const schema = value('DATABASE_SCHEMA');
  let database: DatabaseConfig;
  if (databaseUrl !== undefined) {
    if (!hasProtocol(databaseUrl, ['postgres:', 'postgresql:'])) {
      problems.push(`DATABASE_URL must be a postgres:// or postgresql:// URL (got ${describeUrl(databaseUrl)})`);
    }
    if (schema !== undefined && !SCHEMA_NAME.test(schema)) {
      problems.push(`DATABASE_SCHEMA must be a lower-case SQL identifier of at most 63 characters (got "${schema}")`);
    }
    database = { kind: 'postgres', url: databaseUrl, schema: schema ?? 'public' };
  } else {
    if (schema !== undefined) {
      problems.push('DATABASE_SCHEMA needs DATABASE_URL: the embedded database has no schemas');
    }
    database = { kind: 'embedded', file: resolve(cwd, value('DATA_DIR') ?? '.data', 'orders.sqlite') };
  }

  const redisUrl = value('REDIS_URL');
  if (redisUrl !== undefined && !hasProtocol(redisUrl, ['redis:', 'rediss:'])) {
    problems.push(`REDIS_URL must be a redis:// or rediss:// URL (got ${describeUrl(redisUrl)})`);
  }
  const fastStore: FastStoreConfig = redisUrl !== undefined ? { kind: 'redis', url: redisUrl } : { kind: 'memory' };

  const webhookSecret = value('WEBHOOK_SECRET');
  if (webhookSecret !== undefined && webhookSecret.length < MIN_WEBHOOK_SECRET_LENGTH) {
    problems.push(`WEBHOOK_SECRET must be at least ${MIN_WEBHOOK_SECRET_LENGTH} characters long`);
  }

  const adminToken = value('ADMIN_TOKEN');
  if (adminToken !== undefined && (adminToken.length < MIN_ADMIN_TOKEN_LENGTH || !/^[\x21-\x7e]+$/.test(adminToken))) {
    problems.push(`ADMIN_TOKEN must be at least ${MIN_ADMIN_TOKEN_LENGTH} printable ASCII characters without spaces`);
  }

  const logLevel = (value('LOG_LEVEL') ?? 'log').toLowerCase();
  if (!(LOG_LEVELS_BY_SEVERITY as readonly string[]).includes(logLevel)) {
    problems.push(`LOG_LEVEL must be one of ${LOG_LEVELS_BY_SEVERITY.join(', ')} (got "${logLevel}")`);
  }

  const problemTypeBaseUri = value('PROBLEM_TYPE_BASE_URI') ?? DEFAULT_PROBLEM_TYPE_BASE_URI;
  if (!isAbsoluteUri(problemTypeBaseUri) || !problemTypeBaseUri.endsWith('/')) {
    problems.push(`PROBLEM_TYPE_BASE_URI must be an absolute URI ending with "/" (got "${problemTypeBaseUri}")`);
  }

  const leaseRaw = value('IDEMPOTENCY_LEASE_MS');
  const idempotencyLeaseMs = leaseRaw === undefined ? DEFAULT_IDEMPOTENCY_LEASE_MS : Number(leaseRaw);
  if (!Number.isInteger(idempotencyLeaseMs) || idempotencyLeaseMs < 300 || idempotencyLeaseMs > 3_600_000) {
    problems.push(`IDEMPOTENCY_LEASE_MS must be an integer from 300 to 3600000 (got "${leaseRaw}")`);
  }

  const idempotencyEncryption = parseEncryptionKeys(value('IDEMPOTENCY_ENCRYPTION_KEYS'), problems);

  const queueWorkerRaw = (value('QUEUE_WORKER') ?? 'true').toLowerCase();
  if (!['true', 'false'].includes(queueWorkerRaw)) {
    problems.push(`QUEUE_WORKER must be true or false (got "${queueWorkerRaw}")`);
  }
  const queuePrefix = value('QUEUE_PREFIX') ?? 'bull';
  if (!/^[A-Za-z0-9_.:-]{1,64}$/.test(queuePrefix)) {
    problems.push(`QUEUE_PREFIX must be 1 to 64 letters, digits or _ . : - (got "${queuePrefix}")`);
  }
  const queue: QueueConfig = {
    worker: queueWorkerRaw !== 'false',
    prefix: queuePrefix,
    lockMs: parseMs(value('QUEUE_LOCK_MS'), 'QUEUE_LOCK_MS', DEFAULT_QUEUE_LOCK_MS, 200, 600_000, problems),
    stalledIntervalMs: parseMs(
      value('QUEUE_STALLED_INTERVAL_MS'),
      'QUEUE_STALLED_INTERVAL_MS',
      DEFAULT_QUEUE_STALLED_INTERVAL_MS,
      100,
      600_000,
      problems,
    ),
  };
  const outboxPollMs = parseMs(
    value('OUTBOX_POLL_MS'),
    'OUTBOX_POLL_MS',
    DEFAULT_OUTBOX_POLL_MS,
    100,
    600_000,
    problems,
  );
  const outboxRetentionMs = parseMs(
    value('OUTBOX_RETENTION_MS'),
    'OUTBOX_RETENTION_MS',
    DEFAULT_OUTBOX_RETENTION_MS,
    0,
    999_999_999,
    problems,
  );
  const outboxCleanupIntervalMs = parseMs(
    value('OUTBOX_CLEANUP_INTERVAL_MS'),
    'OUTBOX_CLEANUP_INTERVAL_MS',
    DEFAULT_OUTBOX_CLEANUP_INTERVAL_MS,
    100,
    86_400_000,
    problems,
  );

  const rabbitmqUrl = value('RABBITMQ_URL');
  const rabbitmqQueue = value('RABBITMQ_QUEUE');
  if (rabbitmqUrl !== undefined && !hasProtocol(rabbitmqUrl, ['amqp:', 'amqps:'])) {
    problems.push(`RABBITMQ_URL must be an amqp:// or amqps:// URL (got ${describeUrl(rabbitmqUrl)})`);
  }
  if (rabbitmqQueue !== undefined && !/^[A-Za-z0-9_.:-]{1,200}$/.test(rabbitmqQueue)) {
    problems.push(`RABBITMQ_QUEUE must be 1 to 200 letters, digits or _ . : - (got "${rabbitmqQueue}")`);
  }
  if (rabbitmqQueue !== undefined && rabbitmqUrl === undefined) {
    problems.push('RABBITMQ_QUEUE needs RABBITMQ_URL');
  }
  const rabbitmq: RabbitMqConfig | undefined =
    rabbitmqUrl !== undefined ? { url: rabbitmqUrl, queue: rabbitmqQueue ?? DEFAULT_RABBITMQ_QUEUE } : undefined;

  if (problems.length > 0) {
    throw new OrdersConfigError(problems);
  }
  return {
    port,
    host,
    database,
    fastStore,
    webhookSecret,
    queue,
    outboxPollMs,
    outboxRetentionMs,
    outboxCleanupIntervalMs,
    rabbitmq,
    logLevel: logLevel as LogLevel,
    problemTypeBaseUri,
    idempotencyLeaseMs,
    idempotencyEncryption,
    adminToken,
  };
}

/** The levels Nest should print for a minimum level: `warn` → fatal, error, warn. */
export function logLevelsFrom(minimum: LogLevel): LogLevel[] {
  return LOG_LEVELS_BY_SEVERITY.slice(0, LOG_LEVELS_BY_SEVERITY.indexOf(minimum) + 1);
}

/** The one startup line that says which backends are in use (no passwords). */
export function describeBackends(config: OrdersConfig): string {
  const db =
    config.database.kind === 'postgres'
      ? `PostgreSQL ${redactUrl(config.database.url)} (schema "${config.database.schema}")`
      : `embedded sql.js file ${config.database.file}`;
  const store =
    config.fastStore.kind === 'redis' ? `Redis ${redactUrl(config.fastStore.url)}` : 'in-memory (this process only)';
  const events = config.rabbitmq
    ? `; events = RabbitMQ ${redactUrl(config.rabbitmq.url)} (queue "${config.rabbitmq.queue}")`
    : '';
  return `Backends: database = ${db}; fast store = ${store}${events}`;
}

/** A URL with its password replaced by `***`, for logs and messages. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password === '') {
      return raw;
    }
    url.password = '***';
    return url.toString();
  } catch {
    return '<unparsable URL>';
  }
}

function parsePort(raw: string | undefined, problems: string[]): number {
  if (raw === undefined) {
    return DEFAULT_PORT;
  }
  const port = /^\d{1,5}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(port >= 0 && port <= 65535)) {
    problems.push(`PORT must be an integer from 0 to 65535 (got "${raw}")`);
    return DEFAULT_PORT;
  }
  return port;
}

function parseMs(
  raw: string | undefined,
  name: string,
  fallback: number,
  min: number,
  max: number,
  problems: string[],
): number {
  if (raw === undefined) {
    return fallback;
  }
  const ms = /^\d{1,9}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(ms >= min && ms <= max)) {
    problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
    return fallback;
  }
  return ms;
}

function hasProtocol(raw: string, protocols: string[]): boolean {
  try {
    return protocols.includes(new URL(raw).protocol);
  } catch {
    return false;
  }
}

function isAbsoluteUri(raw: string): boolean {
  try {
    new URL(raw);
    return true;
  } catch {
    return false;
  }
}

function describeUrl(raw: string): string {
  const redacted = redactUrl(raw);
  return redacted === '<unparsable URL>' ? 'a value that is not a URL' : `"${redacted}"`;
}
