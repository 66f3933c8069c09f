import { randomUUID } from 'node:crypto';
import { ORDERS_MIGRATIONS } from '../../apps/orders/src/database/migrations/index.js';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import {
  buildOrdersAppOnce,
  type OrdersProcess,
  runOrdersProcessToExit,
  startOrdersProcess,
} from '../support/orders/app-process.js';
import { freePort } from '../support/net/free-port.js';
import {
  connectPostgresOrFail,
  createThrowawayDatabase,
  dropDatabase,
  dropSchema,
  queryTestDatabase,
  TEST_DATABASE_URL,
  throwawaySchemaName,
} from '../support/servers/postgres.js';
import { newTenant, orderBody, PROBLEM_BASE } from '../support/orders/orders-fixtures.js';

/**
 * The compiled service as real processes: what survives a restart, what happens when several
 * start at once, and what /health says when Redis dies.
 */

const json = { 'Content-Type': 'application/json' };

async function createOrder(base: string, tenantId: string): Promise<{ id: string; paymentId: string }> {
  const res = await fetch(`${base}/orders`, {
    method: 'POST',
    headers: { ...json, 'X-Tenant-ID': tenantId, 'Idempotency-Key': randomUUID() },
    body: JSON.stringify(orderBody()),
  });
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; paymentId: string };
}

/** `/health`'s body: statuses per indicator (with the admin token, also why). */
interface HealthBody {
  status: string;
  details: {
    database: { status: string };
    redis: { status: string };
    idempotency: { status: string; fast: { status: string }; durable: { status: string } };
  };
}

/** A GET whose JSON body the caller types as the route answers it. */
async function getJson<TBody = unknown>(
  base: string,
  path: string,
  tenantId?: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; type: string | null; body: TBody }> {
  const res = await fetch(`${base}${path}`, {
    headers: { ...headers, ...(tenantId ? { 'X-Tenant-ID': tenantId } : {}) },
  });
  return { status: res.status, type: res.headers.get('content-type'), body: (await res.json()) as TBody };
}

const running: OrdersProcess[] = [];
async function start(...args: Parameters<typeof startOrdersProcess>): Promise<OrdersProcess> {
  const proc = await startOrdersProcess(...args);
  running.push(proc);
  return proc;
}

beforeAll(async () => {
  await buildOrdersAppOnce();
}, 180_000);

afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => p.stop()));
});

describe('embedded defaults as a process', () => {
  let cwd: string;

  beforeEach(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'orders-proc-'));
  });

  afterEach(async () => {
    await rm(cwd, { recursive: true, force: true });
  });

  it('creates ./.data on first start and keeps the orders across a stop and a start', async () => {
    const tenantId = newTenant();
    const first = await start({ cwd });
    expect(first.output()).toContain(
      `Backends: database = embedded sql.js file ${join(cwd, '.data', 'orders.sqlite')}`,
    );
    const order = await createOrder(first.url, tenantId);
    expect(await first.stop()).toBe(0);
    expect(existsSync(join(cwd, '.data', 'orders.sqlite'))).toBe(true);

    const second = await start({ cwd });
    const again = await getJson<{ id: string }>(second.url, `/orders/${order.id}`, tenantId);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(order.id);
    const payments = await getJson<Array<{ id: string }>>(second.url, '/payments', tenantId);
    expect(payments.body.map((p) => p.id)).toEqual([order.paymentId]);
    // Migrations ran once, on the first start only.
    expect(first.output()).toContain(`Applied ${ORDERS_MIGRATIONS.length} migration(s)`);
    expect(second.output()).not.toContain('Applied');
  });

  it('refuses bad configuration with a clear message and exit code 1', async () => {
    const { code, output } = await runOrdersProcessToExit(
      { PORT: 'eighty', DATABASE_URL: 'mssql://sa:hunter2@db/orders', LOG_LEVEL: 'loud' },
      cwd,
    );
    expect(code).toBe(1);
    expect(output).toContain('Invalid configuration of the orders service');
    expect(output).toContain('PORT must be an integer from 0 to 65535 (got "eighty")');
    expect(output).toContain('DATABASE_URL must be a postgres://, postgresql://, mysql:// or mariadb:// URL');
    expect(output).toContain('LOG_LEVEL must be one of');
    expect(output).not.toContain('hunter2');
  });
});

describe('several instances against one empty PostgreSQL database', () => {
  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
  });

  it.each([
    ['an empty database (schema public)', 'database'],
    ['a schema that does not exist yet', 'schema'],
  ])('two instances started at the same moment on %s both come up and serve', async (_case, kind) => {
    let env: Record<string, string>;
    let cleanUp: () => Promise<void>;
    let migrationsTable: { url: string; table: string };
    if (kind === 'database') {
      const db = await createThrowawayDatabase('orders_race');
      env = { DATABASE_URL: db.url };
      cleanUp = () => dropDatabase(db.name);
      migrationsTable = { url: db.url, table: 'public.migrations' };
    } else {
      const schema = throwawaySchemaName('orders_race');
      env = { DATABASE_URL: TEST_DATABASE_URL, DATABASE_SCHEMA: schema };
      cleanUp = () => dropSchema(schema);
      migrationsTable = { url: TEST_DATABASE_URL, table: `"${schema}".migrations` };
    }
    try {
      const [a, b] = await Promise.all([start({ env }), start({ env })]);
      const tenantId = newTenant();
      const order = await createOrder(a.url, tenantId);
      const seenByB = await getJson(b.url, `/orders/${order.id}`, tenantId);
      expect(seenByB.status).toBe(200);
      const fromB = await createOrder(b.url, tenantId);
      const listOnA = await getJson<Array<{ id: string }>>(a.url, '/orders', tenantId);
      expect(listOnA.body.map((o) => o.id)).toEqual([fromB.id, order.id]);
      for (const instance of [a, b]) {
        expect((await getJson(instance.url, '/health')).status).toBe(200);
      }
      const applied = [a, b].filter((p) => p.output().includes(`Applied ${ORDERS_MIGRATIONS.length} migration(s)`));
      expect(applied).toHaveLength(1);
      const rows = await queryTestDatabase<{ name: string }>(
        `SELECT name FROM ${migrationsTable.table}`,
        [],
        migrationsTable.url,
      );
      expect(rows.map((r) => r.name)).toEqual(ORDERS_MIGRATIONS.map((migration) => migration.name));
      expect(await a.stop()).toBe(0);
      expect(await b.stop()).toBe(0);
    } finally {
      await Promise.all(running.splice(0).map((p) => p.stop()));
      await cleanUp();
    }
  });
});

describe('health when Redis is configured but down', () => {
  let cwd: string;
  let redisPort: number;
  let redis: ChildProcess | undefined;

  const startRedis = async (): Promise<ChildProcess> => {
    const child = spawn(
      'redis-server',
      ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      {
        stdio: 'ignore',
      },
    );
    const failed = new Promise<never>((_, fail) =>
      child.once('error', (error) =>
        fail(
          new Error(`redis-server could not start (${error.message}): install Redis (see README, "Running the tests")`),
        ),
      ),
    );
    const client = new Redis(redisPort, '127.0.0.1', {
      lazyConnect: true,
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
    });
    client.on('error', () => undefined);
    const ready = (async () => {
      for (let i = 0; i < 50; i++) {
        try {
          await client.connect();
          await client.ping();
          client.disconnect();
          return child;
        } catch {
          client.disconnect();
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      throw new Error(`redis-server on port ${redisPort} did not answer PING within 5 s`);
    })();
    return Promise.race([ready, failed]);
  };

  const stopRedis = async () => {
    if (redis && redis.exitCode === null && redis.signalCode === null) {
      const exited = new Promise((done) => redis!.once('exit', done));
      redis.kill('SIGKILL');
      await exited;
    }
    redis = undefined;
  };

  beforeAll(async () => {
    cwd = await mkdtemp(join(tmpdir(), 'orders-proc-'));
    redisPort = await freePort();
  });

  afterAll(async () => {
    await stopRedis();
    await rm(cwd, { recursive: true, force: true });
  });

  it('answers 200 while Redis answers, 503 problem details once it is killed (why: only with the admin token), 200 when it is back', async () => {
    redis = await startRedis();
    const adminToken = `adm_${randomUUID().replaceAll('-', '')}`;
    const app = await start({ cwd, env: { REDIS_URL: `redis://127.0.0.1:${redisPort}`, ADMIN_TOKEN: adminToken } });

    const up = await getJson<HealthBody>(app.url, '/health');
    expect(up.status).toBe(200);
    expect(up.body.status).toBe('ok');
    expect(up.body.details.redis.status).toBe('up');

    await stopRedis();
    const started = Date.now();
    const down = await getJson<HealthBody>(app.url, '/health');
    expect(down.status).toBe(503);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(down.type).toMatch(/^application\/problem\+json/);
    expect(down.body).toMatchObject({
      type: `${PROBLEM_BASE}health-check-failed`,
      title: 'Service unavailable',
      status: 503,
      detail: 'Not answering: idempotency, redis.',
      code: 'health_check_failed',
      details: {
        database: { status: 'up' },
        redis: { status: 'down' },
        idempotency: { status: 'down', fast: { status: 'down' }, durable: { status: 'up' } },
      },
    });
    // Anyone sees statuses only: no driver message names the host, the port or the cause.
    expect(down.body.details).toEqual({
      database: { status: 'up' },
      redis: { status: 'down' },
      idempotency: { status: 'down', fast: { status: 'down' }, durable: { status: 'up' } },
    });
    expect(JSON.stringify(down.body)).not.toMatch(
      /message|latencyMs|ECONNREFUSED|127\.0\.0\.1|Redis idempotency store/,
    );
    // The admin token shows why, in the same problem.
    const detailed = await getJson<HealthBody>(app.url, '/health', undefined, {
      Authorization: `Bearer ${adminToken}`,
    });
    expect(detailed.status).toBe(503);
    expect(detailed.body.details).toMatchObject({
      redis: { status: 'down', message: expect.any(String) },
      idempotency: {
        status: 'down',
        fast: {
          status: 'down',
          latencyMs: expect.any(Number),
          error: expect.stringContaining('Redis idempotency store'),
        },
        durable: { status: 'up', latencyMs: expect.any(Number) },
      },
    });

    // Without its fast store the idempotency layer fails closed: 503, and nothing is written.
    const tenantId = newTenant();
    const refused = await fetch(`${app.url}/orders`, {
      method: 'POST',
      headers: { ...json, 'X-Tenant-ID': tenantId, 'Idempotency-Key': randomUUID() },
      body: JSON.stringify(orderBody()),
    });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(((await refused.json()) as { code: string }).code).toBe('idempotency_store_unavailable');
    expect((await getJson(app.url, '/orders', tenantId)).body).toEqual([]);

    redis = await startRedis();
    let back = await getJson(app.url, '/health');
    for (let i = 0; i < 50 && back.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 200));
      back = await getJson(app.url, '/health');
    }
    expect(back.status).toBe(200);
    expect(await app.stop()).toBe(0);
  });

  it('starts even when Redis is down from the beginning, and says 503', async () => {
    const unused = await freePort();
    const app = await start({ cwd, env: { REDIS_URL: `redis://127.0.0.1:${unused}` } });
    const down = await getJson<HealthBody>(app.url, '/health');
    expect(down.status).toBe(503);
    expect(down.body.details.redis.status).toBe('down');
    expect(down.body.details.idempotency.fast.status).toBe('down');
    expect(await app.stop()).toBe(0);
  });
});
