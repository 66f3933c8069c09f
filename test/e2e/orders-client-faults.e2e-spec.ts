import { randomUUID } from 'node:crypto';
import axios, { type AxiosResponse } from 'axios';
import type pg from 'pg';
import {
  withIdempotency,
  withIdempotencyAxios,
  type FetchLike,
  type IdempotentCallOutcome,
  type IdempotentClientOptions,
  type IdempotentResponse,
} from 'nestjs-idempotency/client';
import { buildOrdersAppOnce, startOrdersProcess, type OrdersProcess } from '../support/orders/app-process.js';
import { freePort } from '../support/net/free-port.js';
import { startTcpProxy, type TcpProxy } from '../support/net/tcp-proxy.js';
import { countForTenant, orderIdsOf } from '../support/orders/orders-db.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';
import {
  connectPostgresOrFail,
  dropSchema,
  TEST_DATABASE_URL,
  throwawaySchemaName,
  waitForLockWaiters,
} from '../support/servers/postgres.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';

/**
 * The two halves together: the orders service (a real process on PostgreSQL and a Redis of its
 * own) called through `nestjs-idempotency/client` while things break. The connection is cut
 * after the handler ran, the process is killed mid-request and restarted, the store is down
 * (503), a duplicate is in progress (409): each time the caller gets the order, and exactly one
 * order and one charge exist.
 */
const LEASE_MS = 1500;
/** Real waits, kept short; generous attempts, since a restart takes a few seconds. */
const RETRIES: IdempotentClientOptions = {
  maxAttempts: 40,
  baseDelayMs: 100,
  maxDelayMs: 500,
  deadlineMs: 60_000,
  retryBudget: false,
};

describe('the idempotent client against the orders service under faults', () => {
  let schema: string;
  let redis: ThrowawayRedis;
  let env: Record<string, string>;
  let port: number;
  let service: OrdersProcess;

  const createOrder = (
    client: (url: string, init: RequestInit & { idempotencyKey?: string }) => Promise<IdempotentResponse>,
    baseUrl: string,
    tenantId: string,
    key?: string,
    body = orderBody(),
  ) =>
    client(`${baseUrl}/orders`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Tenant-ID': tenantId },
      body: JSON.stringify(body),
      idempotencyKey: key,
    });

  /** The caller got the order, and it is the tenant's only order with one charge. */
  const expectOneOrderReturned = async (tenantId: string, order: { id: string }) => {
    expect(await orderIdsOf(schema, tenantId)).toEqual([order.id]);
    expect(await countForTenant(schema, 'payments', tenantId)).toBe(1);
  };

  /** Holds `POST /orders` inside its transaction: its payment insert waits on this lock. */
  const lockers = new Set<pg.Client>();
  const lockPayments = async (): Promise<pg.Client> => {
    const locker = await connectPostgresOrFail();
    lockers.add(locker);
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE "${schema}".payments IN EXCLUSIVE MODE`);
    return locker;
  };
  const unlock = async (locker: pg.Client) => {
    if (!lockers.delete(locker)) return;
    await locker.query('ROLLBACK');
    await locker.end();
  };
  // A failed test must not leave the table locked (the schema could not be dropped).
  afterEach(async () => {
    for (const locker of [...lockers]) await unlock(locker);
  });

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    await buildOrdersAppOnce();
    redis = await startRedisServer();
    schema = throwawaySchemaName('client_e2e');
    port = await freePort();
    env = {
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: schema,
      REDIS_URL: redis.url,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      PORT: String(port),
    };
    service = await startOrdersProcess({ env });
  }, 180_000);
  afterAll(async () => {
    await service?.stop();
    await redis?.stop();
    if (schema) await dropSchema(schema);
  });

  describe('the connection is cut after the handler ran (its 201 never reaches the caller)', () => {
    let proxy: TcpProxy;
    beforeEach(async () => {
      proxy = await startTcpProxy(port);
    });
    afterEach(async () => {
      await proxy.close();
    });

    it('fetch: the retry carries the same key and gets the order, replayed', async () => {
      const cut = proxy.arm({ match: /^HTTP\/1\.1 201/, direction: 'to-client', action: 'cut' });
      const tenantId = newTenant();
      const res = await createOrder(withIdempotency(fetch, RETRIES), `http://127.0.0.1:${proxy.port}`, tenantId);
      expect(cut.fired).toBe(true);
      expect(res.status).toBe(201);
      expect(res.idempotency).toMatchObject({ attempts: 2, replayed: true });
      await expectOneOrderReturned(tenantId, (await res.json()) as { id: string });
    });

    it("axios (Nest's HttpService.axiosRef): the same", async () => {
      const cut = proxy.arm({ match: /^HTTP\/1\.1 201/, direction: 'to-client', action: 'cut' });
      const client = withIdempotencyAxios(axios.create({ baseURL: `http://127.0.0.1:${proxy.port}` }), RETRIES);
      const tenantId = newTenant();
      const res = (await client.post('/orders', orderBody(), {
        headers: { 'X-Tenant-ID': tenantId },
      })) as AxiosResponse<{
        id: string;
      }> & { idempotency: IdempotentCallOutcome };
      expect(cut.fired).toBe(true);
      expect(res.status).toBe(201);
      expect(res.idempotency).toMatchObject({ attempts: 2, replayed: true });
      await expectOneOrderReturned(tenantId, res.data);
    });
  });

  it('a duplicate in progress (409): the second caller retries after Retry-After and gets the same order', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const locker = await lockPayments();
    const first = createOrder(withIdempotency(fetch, RETRIES), service.url, tenantId, key, body);
    expect(await waitForLockWaiters(locker, schema, 'payments', 10_000)).toBe(1);

    // The second caller's first answer is the 409; only then does the first request go on.
    const statuses: number[] = [];
    const releaseOnConflict: FetchLike = async (input, init) => {
      const res = await fetch(input, init);
      statuses.push(res.status);
      if (res.status === 409 && statuses.length === 1) await unlock(locker);
      return res;
    };
    const second = await createOrder(withIdempotency(releaseOnConflict, RETRIES), service.url, tenantId, key, body);
    const original = await first;

    expect(statuses[0]).toBe(409);
    expect(original.status).toBe(201);
    expect(original.idempotency).toMatchObject({ attempts: 1, replayed: false });
    expect(second.status).toBe(201);
    expect(second.idempotency.replayed).toBe(true);
    expect(second.idempotency.attempts).toBeGreaterThanOrEqual(2);
    const order = (await original.json()) as { id: string };
    expect(((await second.json()) as { id: string }).id).toBe(order.id);
    await expectOneOrderReturned(tenantId, order);
  });

  it('the store is down (503): nothing is written, and the retries get the order once Redis is back', async () => {
    const tenantId = newTenant();
    await redis.stop();
    const answers: Array<{ status: number; ordersThen: number }> = [];
    const restartRedisOnFirst503: FetchLike = async (input, init) => {
      const res = await fetch(input, init);
      answers.push({ status: res.status, ordersThen: await countForTenant(schema, 'orders', tenantId) });
      if (res.status === 503 && answers.length === 1) redis = await startRedisServer({ port: redis.port });
      return res;
    };
    const res = await createOrder(withIdempotency(restartRedisOnFirst503, RETRIES), service.url, tenantId);
    expect(answers[0]).toEqual({ status: 503, ordersThen: 0 });
    expect(res.status).toBe(201);
    expect(res.idempotency.attempts).toBeGreaterThanOrEqual(2);
    expect(res.idempotency.attempts).toBe(answers.length);
    await expectOneOrderReturned(tenantId, (await res.json()) as { id: string });
  }, 60_000);

  it('the process is killed mid-request and restarted: the retries reach the new one, which runs the order once', async () => {
    const tenantId = newTenant();
    const locker = await lockPayments();
    // Retries bounded by the deadline, not a count: a restart on a busy machine takes a while.
    const untilRestarted = withIdempotency(fetch, { ...RETRIES, maxAttempts: 10_000, deadlineMs: 150_000 });
    const pending = createOrder(untilRestarted, service.url, tenantId);
    expect(await waitForLockWaiters(locker, schema, 'payments', 10_000)).toBe(1);

    const exited = new Promise((resolve) => service.child.once('exit', resolve));
    service.child.kill('SIGKILL');
    await exited;
    await unlock(locker);
    expect(await countForTenant(schema, 'orders', tenantId)).toBe(0);
    service = await startOrdersProcess({ env });

    const res = await pending;
    expect(res.status).toBe(201);
    expect(res.idempotency.attempts).toBeGreaterThanOrEqual(2);
    await expectOneOrderReturned(tenantId, (await res.json()) as { id: string });
  }, 180_000);
});
