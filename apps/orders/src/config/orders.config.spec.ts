import { describeBackends, logLevelsFrom, validateOrdersEnvironment } from './orders.config.js';
import { type EnvironmentVariables, OrdersConfigError } from './orders.environment.js';
import { redactUrl } from './redact-url.js';

/** The `validate` step of the service's ConfigModule, with the working directory fixed. */
const parseOrdersConfig = (env: EnvironmentVariables, cwd = '/srv/app') => validateOrdersEnvironment(env, cwd);

const problemsOf = (env: EnvironmentVariables): string[] => {
  try {
    parseOrdersConfig(env);
  } catch (error) {
    if (error instanceof OrdersConfigError) {
      return error.problems;
    }
    throw error;
  }
  throw new Error('expected an OrdersConfigError');
};

describe('validateOrdersEnvironment (the class-validator schema and its namespaces)', () => {
  it('runs on embedded defaults with an empty environment', () => {
    expect(parseOrdersConfig({})).toEqual({
      http: { port: 3000, host: '0.0.0.0' },
      log: { level: 'log' },
      database: { kind: 'embedded', file: '/srv/app/.data/orders.sqlite' },
      fastStore: { kind: 'memory' },
      queue: { worker: true, prefix: 'bull', lockMs: 30_000, stalledIntervalMs: 30_000, rabbitmq: undefined },
      outbox: { pollMs: 5_000, retentionMs: 86_400_000, cleanupIntervalMs: 60_000 },
      webhooks: { secret: undefined },
      admin: { token: undefined },
      idempotency: { leaseMs: 30_000, encryption: undefined },
      problems: { typeBaseUri: 'https://api.example.com/problems/' },
    });
  });

  it('reads IDEMPOTENCY_ENCRYPTION_KEYS (first key active) and refuses bad entries without quoting key material', () => {
    const k1 = Buffer.alloc(32, 1);
    const k2 = Buffer.alloc(32, 2);
    const config = parseOrdersConfig({
      IDEMPOTENCY_ENCRYPTION_KEYS: `2026-11:${k1.toString('base64')}, 2026-10:${k2.toString('base64')}`,
    });
    expect(config.idempotency.encryption).toEqual({
      keys: [
        { id: '2026-11', key: k1 },
        { id: '2026-10', key: k2 },
      ],
      activeKeyId: '2026-11',
    });
    const short = Buffer.alloc(16, 3).toString('base64');
    const problems = problemsOf({
      IDEMPOTENCY_ENCRYPTION_KEYS: `a:${short},b c:${k1.toString('base64')},a:${k2.toString('base64')},d:${k1.toString('base64')}`,
    });
    expect(problems).toEqual([
      'IDEMPOTENCY_ENCRYPTION_KEYS key "a" must be 32 bytes in base64 (e.g. openssl rand -base64 32)',
      'IDEMPOTENCY_ENCRYPTION_KEYS entry 2 must be <id>:<base64 key> with an id of 1 to 64 letters, digits or . _ -',
    ]);
    expect(
      problemsOf({ IDEMPOTENCY_ENCRYPTION_KEYS: `a:${k1.toString('base64')},a:${k2.toString('base64')}` }),
    ).toEqual(['IDEMPOTENCY_ENCRYPTION_KEYS lists the key id "a" twice']);
    expect(problems.join(' ')).not.toContain(short);
  });

  it('reads ADMIN_TOKEN and refuses a short one or one with spaces, without echoing it', () => {
    const token = 'adm_0123456789abcdef0123456789abcdef';
    expect(parseOrdersConfig({ ADMIN_TOKEN: token }).admin.token).toBe(token);
    const problem = 'ADMIN_TOKEN must be at least 32 printable ASCII characters without spaces';
    expect(problemsOf({ ADMIN_TOKEN: 'short-token' })).toEqual([problem]);
    expect(problemsOf({ ADMIN_TOKEN: 'a token with spaces that is long enough' })).toEqual([problem]);
  });

  it('reads the queue settings and refuses bad ones', () => {
    const config = parseOrdersConfig({
      QUEUE_WORKER: 'FALSE',
      QUEUE_PREFIX: 'orders:test',
      QUEUE_LOCK_MS: '1000',
      QUEUE_STALLED_INTERVAL_MS: '500',
      OUTBOX_POLL_MS: '250',
    });
    expect(config.queue).toEqual({
      worker: false,
      prefix: 'orders:test',
      lockMs: 1000,
      stalledIntervalMs: 500,
      rabbitmq: undefined,
    });
    expect(config.outbox.pollMs).toBe(250);
    expect(
      problemsOf({ QUEUE_WORKER: 'maybe', QUEUE_PREFIX: 'a b', QUEUE_LOCK_MS: '5', OUTBOX_POLL_MS: 'soon' }),
    ).toEqual([
      'QUEUE_WORKER must be true or false (got "maybe")',
      'QUEUE_PREFIX must be 1 to 64 letters, digits or _ . : - (got "a b")',
      'QUEUE_LOCK_MS must be an integer from 200 to 600000 (got "5")',
      'OUTBOX_POLL_MS must be an integer from 100 to 600000 (got "soon")',
    ]);
  });

  it('reads the outbox retention and RabbitMQ, and refuses bad values', () => {
    const config = parseOrdersConfig({
      OUTBOX_RETENTION_MS: '3600000',
      OUTBOX_CLEANUP_INTERVAL_MS: '5000',
      RABBITMQ_URL: 'amqp://guest:secret@mq:5672',
      RABBITMQ_QUEUE: 'orders.events',
    });
    expect(config).toMatchObject({
      outbox: { retentionMs: 3_600_000, cleanupIntervalMs: 5_000 },
      queue: { rabbitmq: { url: 'amqp://guest:secret@mq:5672', queue: 'orders.events' } },
    });
    expect(parseOrdersConfig({ RABBITMQ_URL: 'amqps://mq' }).queue.rabbitmq).toEqual({
      url: 'amqps://mq',
      queue: 'order-events',
    });
    const problems = problemsOf({
      OUTBOX_RETENTION_MS: '-1',
      RABBITMQ_URL: 'http://user:hunter2@mq',
      RABBITMQ_QUEUE: 'a queue',
    });
    expect(problems).toEqual([
      'OUTBOX_RETENTION_MS must be an integer from 0 to 999999999 (got "-1")',
      'RABBITMQ_URL must be an amqp:// or amqps:// URL (got "http://user:***@mq/")',
      'RABBITMQ_QUEUE must be 1 to 200 letters, digits or _ . : - (got "a queue")',
    ]);
    expect(problemsOf({ RABBITMQ_QUEUE: 'orders' })).toEqual(['RABBITMQ_QUEUE needs RABBITMQ_URL']);
  });

  it('reads IDEMPOTENCY_LEASE_MS and refuses a value outside 300..3600000', () => {
    expect(parseOrdersConfig({ IDEMPOTENCY_LEASE_MS: '1500' }).idempotency.leaseMs).toBe(1500);
    expect(problemsOf({ IDEMPOTENCY_LEASE_MS: '100' })).toEqual([
      'IDEMPOTENCY_LEASE_MS must be an integer from 300 to 3600000 (got "100")',
    ]);
    expect(problemsOf({ IDEMPOTENCY_LEASE_MS: 'soon' })).toEqual([
      'IDEMPOTENCY_LEASE_MS must be an integer from 300 to 3600000 (got "soon")',
    ]);
  });

  it('reads IDEMPOTENCY_PARTITION_MS (the partitioned table) with DATABASE_URL only, from 1000 to 604800000', () => {
    const url = 'postgres://db/x';
    expect(parseOrdersConfig({ DATABASE_URL: url, IDEMPOTENCY_PARTITION_MS: '86400000' }).database).toEqual({
      kind: 'postgres',
      url,
      schema: 'public',
      idempotencyPartitionMs: 86_400_000,
    });
    expect(problemsOf({ DATABASE_URL: url, IDEMPOTENCY_PARTITION_MS: '999' })).toEqual([
      'IDEMPOTENCY_PARTITION_MS must be an integer from 1000 to 604800000 (got "999")',
    ]);
    expect(problemsOf({ IDEMPOTENCY_PARTITION_MS: '60000' })[0]).toMatch(
      /^IDEMPOTENCY_PARTITION_MS needs DATABASE_URL/,
    );
  });

  it('treats empty values as absent', () => {
    const config = parseOrdersConfig({ PORT: '', DATABASE_URL: ' ', REDIS_URL: '', LOG_LEVEL: '  ' });
    expect(config.http.port).toBe(3000);
    expect(config.log.level).toBe('log');
    expect(config.database.kind).toBe('embedded');
    expect(config.fastStore.kind).toBe('memory');
  });

  it('uses PostgreSQL and Redis when their URLs are set', () => {
    const config = parseOrdersConfig({
      PORT: '8080',
      DATABASE_URL: 'postgres://app:secret@db:5432/orders',
      DATABASE_SCHEMA: 'tenant_a',
      REDIS_URL: 'redis://cache:6379',
      WEBHOOK_SECRET: 'a-secret-of-enough-length',
      LOG_LEVEL: 'DEBUG',
    });
    expect(config.http.port).toBe(8080);
    expect(config.database).toEqual({
      kind: 'postgres',
      url: 'postgres://app:secret@db:5432/orders',
      schema: 'tenant_a',
    });
    expect(config.fastStore).toEqual({ kind: 'redis', url: 'redis://cache:6379' });
    expect(config.webhooks.secret).toBe('a-secret-of-enough-length');
    expect(config.log.level).toBe('debug');
  });

  it('defaults the PostgreSQL schema to public and accepts postgresql:// and rediss://', () => {
    const config = parseOrdersConfig({ DATABASE_URL: 'postgresql://db/orders', REDIS_URL: 'rediss://cache:6380' });
    expect(config.database).toEqual({ kind: 'postgres', url: 'postgresql://db/orders', schema: 'public' });
    expect(config.fastStore).toEqual({ kind: 'redis', url: 'rediss://cache:6380' });
  });

  it('resolves DATA_DIR against the working directory', () => {
    expect(parseOrdersConfig({ DATA_DIR: 'var/db' }).database).toEqual({
      kind: 'embedded',
      file: '/srv/app/var/db/orders.sqlite',
    });
    expect(parseOrdersConfig({ DATA_DIR: '/data' }).database).toEqual({
      kind: 'embedded',
      file: '/data/orders.sqlite',
    });
  });

  it.each([['abc'], ['-1'], ['65536'], ['3000.5'], ['1e3']])('refuses PORT=%s', (port) => {
    expect(problemsOf({ PORT: port })).toEqual([`PORT must be an integer from 0 to 65535 (got "${port}")`]);
  });

  it('accepts PORT=0 (any free port)', () => {
    expect(parseOrdersConfig({ PORT: '0' }).http.port).toBe(0);
  });

  it('refuses a DATABASE_URL that is neither PostgreSQL nor MySQL, without echoing its password', () => {
    const problems = problemsOf({ DATABASE_URL: 'mssql://sa:hunter2@db/orders' });
    expect(problems).toEqual([
      'DATABASE_URL must be a postgres://, postgresql://, mysql:// or mariadb:// URL (got "mssql://sa:***@db/orders")',
    ]);
    expect(problemsOf({ DATABASE_URL: 'not a url' })).toEqual([
      'DATABASE_URL must be a postgres://, postgresql://, mysql:// or mariadb:// URL (got a value that is not a URL)',
    ]);
  });

  it('uses MySQL / MariaDB for a mysql:// or mariadb:// DATABASE_URL, and refuses a DATABASE_SCHEMA with it', () => {
    expect(parseOrdersConfig({ DATABASE_URL: 'mysql://app:secret@db:3306/orders' }).database).toEqual({
      kind: 'mysql',
      url: 'mysql://app:secret@db:3306/orders',
    });
    expect(parseOrdersConfig({ DATABASE_URL: 'mariadb://db/orders' }).database).toEqual({
      kind: 'mysql',
      url: 'mariadb://db/orders',
    });
    expect(problemsOf({ DATABASE_URL: 'mysql://db/orders', DATABASE_SCHEMA: 'orders' })).toEqual([
      'DATABASE_SCHEMA needs a postgres:// or postgresql:// DATABASE_URL: MySQL has no schemas inside a database',
    ]);
  });

  it('refuses a bad schema name, and a schema without DATABASE_URL', () => {
    expect(problemsOf({ DATABASE_URL: 'postgres://db/x', DATABASE_SCHEMA: 'Robert"; DROP' })[0]).toMatch(
      /^DATABASE_SCHEMA must be a lower-case SQL identifier/,
    );
    expect(problemsOf({ DATABASE_SCHEMA: 'orders' })).toEqual([
      'DATABASE_SCHEMA needs DATABASE_URL: the embedded database has no schemas',
    ]);
  });

  it('refuses a REDIS_URL that is not Redis, a short WEBHOOK_SECRET, an unknown LOG_LEVEL, a bad problem base', () => {
    expect(
      problemsOf({
        REDIS_URL: 'http://cache',
        WEBHOOK_SECRET: 'short',
        LOG_LEVEL: 'chatty',
        PROBLEM_TYPE_BASE_URI: 'https://example.com/problems',
      }),
    ).toEqual([
      'REDIS_URL must be a redis:// or rediss:// URL (got "http://cache")',
      'WEBHOOK_SECRET must be at least 16 characters long',
      'LOG_LEVEL must be one of fatal, error, warn, log, debug, verbose (got "chatty")',
      'PROBLEM_TYPE_BASE_URI must be an absolute URI ending with "/" (got "https://example.com/problems")',
    ]);
  });

  it('lists every problem in one message that says what to do', () => {
    const error = (() => {
      try {
        parseOrdersConfig({ PORT: 'x', LOG_LEVEL: 'loud' });
      } catch (e) {
        return e as Error;
      }
      throw new Error('expected an error');
    })();
    expect(error).toBeInstanceOf(OrdersConfigError);
    expect(error.message).toContain('  - PORT must be an integer');
    expect(error.message).toContain('  - LOG_LEVEL must be one of');
    expect(error.message).toContain('see apps/orders/README.md');
  });
});

describe('logLevelsFrom', () => {
  it('keeps the given level and the more severe ones', () => {
    expect(logLevelsFrom('warn')).toEqual(['fatal', 'error', 'warn']);
    expect(logLevelsFrom('verbose')).toEqual(['fatal', 'error', 'warn', 'log', 'debug', 'verbose']);
  });
});

describe('describeBackends', () => {
  it('names both backends in one line, without passwords', () => {
    const line = describeBackends(
      parseOrdersConfig({ DATABASE_URL: 'postgres://app:secret@db:5432/orders', REDIS_URL: 'redis://:pw@cache:6379' }),
    );
    expect(line).toBe(
      'Backends: database = PostgreSQL postgres://app:***@db:5432/orders (schema "public"); fast store = Redis redis://:***@cache:6379',
    );
    expect(describeBackends(parseOrdersConfig({}))).toBe(
      'Backends: database = embedded sql.js file /srv/app/.data/orders.sqlite; fast store = in-memory (this process only)',
    );
  });

  it('redacts nothing when there is no password', () => {
    expect(redactUrl('redis://cache:6379')).toBe('redis://cache:6379');
  });
});
