import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { INestApplication } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { send, type HttpResult } from '../support/http/send.js';
import { ordersDatabases, type OrdersDatabase, type OrdersTable } from '../support/orders/orders-databases.js';
import { openRedis } from '../support/servers/redis.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../support/net/tcp-proxy.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';
import { waitUntil } from '../support/timing.js';

/**
 * The durable tier as the authority (DESIGN "The flow of one request", steps 4, 6, 7), on the
 * sample service: Redis forgets, the service restarts, PostgreSQL goes away, the business write
 * fails. Redis here is a throwaway server of this suite (it is flushed and restarted on purpose).
 */

const listen = async (app: INestApplication): Promise<string> => {
  await app.listen(0, '127.0.0.1');
  return (await app.getUrl()).replace('[::1]', '127.0.0.1');
};

const expectReplayOf = (retry: HttpResult, first: HttpResult) => {
  expect(retry.status).toBe(201);
  expect(retry.headers.get('idempotent-replayed')).toBe('true');
  expect(retry.body.equals(first.body)).toBe(true);
};

describe.each(ordersDatabases)('durable authority on %s + Redis (sample service)', (name, openDatabase) => {
  let redis: ThrowawayRedis;
  let proxy: TcpProxy;
  let db: OrdersDatabase;
  let env: NodeJS.ProcessEnv;
  let app: INestApplication | undefined;
  let url: string;

  const order = (tenantId: string, key: string, body: unknown) =>
    send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
  const count = (table: OrdersTable, tenantId?: string) => db.count(table, tenantId);
  // Before Redis loses its data: the order's confirmation job (BullMQ, on that Redis) has run, or
  // it would be lost with it, and a later test would wait for a confirmation that never comes.
  const confirmed = (tenantId: string) =>
    waitUntil(async () => (await count('order_notifications', tenantId)) === 1, 10_000, 'the order is confirmed');
  const restartApp = async () => {
    await app?.close();
    app = await createOrdersApp({ env, logger: false });
    url = await listen(app);
  };

  beforeAll(async () => {
    db = await openDatabase('durable_e2e');
    redis = await startRedisServer();
    proxy = await startTcpProxy(db.port);
    env = { ...db.env(proxy.port), REDIS_URL: redis.url };
    await restartApp();
  });
  afterAll(async () => {
    await app?.close();
    await proxy?.close();
    await redis?.stop();
    await db?.drop();
  });

  it('runs on the idempotency table its environment asks for', async () => {
    expect(await db.partitionedIdempotencyTable()).toBe(name.includes('partitioned'));
  });

  it('FLUSHALL between the order and its retry: the durable record replays; one order, one charge', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const first = await order(tenantId, key, body);
    expect(first.status).toBe(201);
    await confirmed(tenantId);
    const client = await openRedis(redis.url);
    await client.flushall();
    client.disconnect();
    expectReplayOf(await order(tenantId, key, body), first);
    expect(await count('orders', tenantId)).toBe(1);
    expect(await count('payments', tenantId)).toBe(1);
    // The replay repaired the fast tier: the next retry is answered by Redis alone.
    expectReplayOf(await order(tenantId, key, body), first);
  });

  it('Redis restarted without persistence between the order and its retry: a replay; one order, one charge', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const first = await order(tenantId, key, body);
    expect(first.status).toBe(201);
    await confirmed(tenantId);
    const port = redis.port;
    await redis.stop();
    redis = await startRedisServer({ port });
    let retry = await order(tenantId, key, body);
    for (let i = 0; i < 20 && retry.status === 503; i++) {
      await new Promise((r) => setTimeout(r, 100)); // the app's client reconnects
      retry = await order(tenantId, key, body);
    }
    expectReplayOf(retry, first);
    expect(await count('orders', tenantId)).toBe(1);
    expect(await count('payments', tenantId)).toBe(1);
  });

  it('the service restarted between the order and its retry: a replay', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const first = await order(tenantId, key, body);
    await restartApp();
    expectReplayOf(await order(tenantId, key, body), first);
    expect(await count('orders', tenantId)).toBe(1);
  });

  it('the same key with another payload, after Redis forgot it, is still 422 (the durable row decides)', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    await order(tenantId, key, orderBody({ currency: 'USD' }));
    await confirmed(tenantId);
    const client = await openRedis(redis.url);
    await client.flushall();
    client.disconnect();
    const other = await order(tenantId, key, orderBody({ currency: 'GBP' }));
    expect(other.status).toBe(422);
    expect(other.json().code).toBe('idempotency_key_reused');
    expect(await count('orders', tenantId)).toBe(1);
  });

  it('a failing business write rolls back with the idempotency record, and the retry runs again', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    // Earlier tests' orders are still being confirmed in the background (outbox, queue, a consumer
    // whose run() adds a record of its own): the baseline is taken once every one of them is.
    await waitUntil(
      async () => (await count('order_notifications')) === (await count('orders')),
      20_000,
      'every earlier order is confirmed',
    );
    const records = await count('idempotency_records');
    await db.renameTable('payments', 'payments_away');
    let failed: HttpResult;
    try {
      failed = await order(tenantId, key, body);
    } finally {
      await db.renameTable('payments_away', 'payments');
    }
    expect(failed.status).toBe(500);
    expect(await count('orders', tenantId)).toBe(0);
    expect(await count('idempotency_records')).toBe(records);
    const retry = await order(tenantId, key, body);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await count('orders', tenantId)).toBe(1);
    expect(await count('payments', tenantId)).toBe(1);
  });

  it('the database unreachable on the durable route: 503, the handler does not run, nothing half-written', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    await proxy.cut();
    let refused: HttpResult;
    try {
      refused = await order(tenantId, key, body);
    } finally {
      proxy.restore();
    }
    expect(refused.status).toBe(503);
    expect(refused.json().code).toBe('idempotency_store_unavailable');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await count('orders', tenantId)).toBe(0);
    // The fast claim was released: the retry, once the database is back, runs as a fresh request.
    let retry = await order(tenantId, key, body);
    for (let i = 0; i < 20 && retry.status === 503; i++) {
      await new Promise((r) => setTimeout(r, 100));
      retry = await order(tenantId, key, body);
    }
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await count('orders', tenantId)).toBe(1);
  });
});

describe('durable authority on the embedded defaults (sql.js + memory store)', () => {
  let dir: string;
  let app: INestApplication | undefined;
  let url: string;

  const order = (tenantId: string, key: string, body: unknown) =>
    send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
  const list = async (path: string, tenantId: string) =>
    (await send(url, path, { method: 'GET', headers: { 'X-Tenant-ID': tenantId } })).json<unknown[]>();
  const restartApp = async () => {
    await app?.close();
    app = await createOrdersApp({ env: { DATA_DIR: dir }, logger: false });
    url = await listen(app);
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'orders-durable-'));
    await restartApp();
  });
  afterAll(async () => {
    await app?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('the service restarted (memory store gone) between the order and its retry: the sql.js record replays', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const first = await order(tenantId, key, body);
    expect(first.status).toBe(201);
    await restartApp();
    expectReplayOf(await order(tenantId, key, body), first);
    expect(await list('/orders', tenantId)).toHaveLength(1);
    expect(await list('/payments', tenantId)).toHaveLength(1);
  });

  it('a failing business write rolls back with the idempotency record, and the retry runs again', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const dataSource = app!.get(DataSource);
    await dataSource.query('ALTER TABLE payments RENAME TO payments_away');
    let failed: HttpResult;
    try {
      failed = await order(tenantId, key, body);
    } finally {
      await dataSource.query('ALTER TABLE payments_away RENAME TO payments');
    }
    expect(failed.status).toBe(500);
    expect(await list('/orders', tenantId)).toHaveLength(0);
    const retry = await order(tenantId, key, body);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await list('/orders', tenantId)).toHaveLength(1);
    expect(await list('/payments', tenantId)).toHaveLength(1);
  });
});
