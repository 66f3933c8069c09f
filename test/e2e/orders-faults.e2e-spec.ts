import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import type { INestApplication } from '@nestjs/common';
import { IdempotencyService } from 'nestjs-idempotency';
import { IdempotencyAdmin } from 'nestjs-idempotency/admin';
import type pg from 'pg';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { send, type HttpResult } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import {
  connectPostgresOrFail,
  dropSchema,
  TEST_DATABASE_URL,
  throwawaySchemaName,
  waitForLockWaiters,
} from '../support/servers/postgres.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../support/net/tcp-proxy.js';
import { countForTenant, orderIdsOf } from '../support/orders/orders-db.js';
import { newTenant, orderBody, type OrderBody } from '../support/orders/orders-fixtures.js';
import {
  PG_DURABLE_CLAIM,
  PG_DURABLE_COMPLETE_AND_COMMIT,
  REDIS_CLAIM,
  REDIS_COMPLETE,
} from '../support/net/store-commands.js';

/**
 * Faults at each step of `POST /orders` (transactional, durable): before the claim, right after
 * it, at and after the commit, before the fast tier follows, before the response is written,
 * and a client that leaves mid-request. The service runs in-process; Redis (a throwaway server)
 * and PostgreSQL are reached through TCP proxies that cut, silence or hold a connection at the
 * moment a given command passes. Every test states the outcome in its title and proves: no
 * duplicate side effect, no confirmed order lost, the retry gets a true answer.
 */
const LEASE_MS = 1500;

const isReplay = (r: HttpResult) => r.status === 201 && r.headers.get('idempotent-replayed') === 'true';
const isFresh = (r: HttpResult) => r.status === 201 && r.headers.get('idempotent-replayed') === null;
const isRetryable = (r: HttpResult, code: string) =>
  r.json().code === code && Number(r.headers.get('retry-after')) >= 1;

describe('faults at each step of POST /orders (PostgreSQL + Redis behind TCP proxies)', () => {
  let redis: ThrowawayRedis;
  let redisProxy: TcpProxy;
  let pgProxy: TcpProxy;
  let schema: string;
  let app: INestApplication;
  let url: string;

  const order = (tenantId: string, key: string, body: OrderBody) =>
    send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });

  /** One order of a tenant of its own: its first request, its retries, what the database holds. */
  const newOrder = () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    return {
      tenantId,
      key,
      body,
      send: () => order(tenantId, key, body),
      /** Retries while the answer is a 409 in progress or a 503; resolves with the first other answer. */
      retryUntilAnswered: async () => (await retryWhile(tenantId, key, body, busyOrUnavailable)).at(-1)!,
      orderIds: () => orderIdsOf(schema, tenantId),
      expectOneOrderOneCharge: async () => {
        expect(await countForTenant(schema, 'orders', tenantId)).toBe(1);
        expect(await countForTenant(schema, 'payments', tenantId)).toBe(1);
      },
    };
  };

  /** The first answer is a 503 + Retry-After with nothing written; the retries end in a fresh 201; one order, one charge. */
  const expectRefusedThenCreatedOnce = async (attempt: ReturnType<typeof newOrder>, first: HttpResult) => {
    expect(first.status).toBe(503);
    expect(isRetryable(first, 'idempotency_store_unavailable')).toBe(true);
    expect(await countForTenant(schema, 'orders', attempt.tenantId)).toBe(0);
    expect(isFresh(await attempt.retryUntilAnswered())).toBe(true);
    await attempt.expectOneOrderOneCharge();
  };

  /**
   * Retries (as a client would, same key and payload, a short pause between tries) while the
   * answer is one of `passing`; returns every answer, the last one being the first other.
   */
  const retryWhile = async (tenantId: string, key: string, body: OrderBody, passing: (r: HttpResult) => boolean) => {
    const answers: HttpResult[] = [];
    const deadline = Date.now() + 20_000;
    for (;;) {
      const answer = await order(tenantId, key, body);
      answers.push(answer);
      if (!passing(answer) || Date.now() > deadline) return answers;
      await sleep(150);
    }
  };
  const busyOrUnavailable = (r: HttpResult) =>
    (r.status === 409 && isRetryable(r, 'idempotency_request_in_progress')) ||
    (r.status === 503 && isRetryable(r, 'idempotency_store_unavailable'));

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    redis = await startRedisServer();
    redisProxy = await startTcpProxy(redis.port);
    pgProxy = await startTcpProxy(Number(new URL(TEST_DATABASE_URL).port || 5432));
    schema = throwawaySchemaName('faults_e2e');
    const viaProxy = new URL(TEST_DATABASE_URL);
    viaProxy.port = String(pgProxy.port);
    app = await createOrdersApp({
      env: {
        DATABASE_URL: viaProxy.toString(),
        DATABASE_SCHEMA: schema,
        REDIS_URL: `redis://127.0.0.1:${redisProxy.port}`,
        IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
        // No background transactions besides the request's: a fault aimed at COMMIT hits it (the
        // queue worker completes durable records of its own when it sends a confirmation).
        OUTBOX_POLL_MS: '600000',
        QUEUE_WORKER: 'false',
      },
      logger: false,
    });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await redisProxy?.close();
    await pgProxy?.close();
    await redis?.stop();
    if (schema) await dropSchema(schema);
  });
  afterEach(() => {
    redisProxy.restore();
    pgProxy.restore();
  });

  it('before the claim, Redis refuses connections: 503 + Retry-After and no order; once it is back, 201; one order, one charge', async () => {
    const attempt = newOrder();
    await redisProxy.cut();
    const refused = await attempt.send();
    redisProxy.restore();
    await expectRefusedThenCreatedOnce(attempt, refused);
  });

  it('before the claim, Redis silent (bytes dropped): 503 + Retry-After within seconds, no order; once it answers, 201; one order, one charge', async () => {
    const attempt = newOrder();
    redisProxy.blackhole();
    const refused = await attempt.send();
    redisProxy.restore();
    await expectRefusedThenCreatedOnce(attempt, refused);
  });

  it('right after the Redis claim, its reply lost: 503 or 409 (the claim stands, nobody runs it), 409 + Retry-After while its lease lives, then 201; one order, one charge', async () => {
    const attempt = newOrder();
    const fault = redisProxy.arm({ match: REDIS_CLAIM, action: 'cut-reply' });
    const first = await attempt.send();
    expect(fault.fired).toBe(true);
    expect(busyOrUnavailable(first)).toBe(true);
    expect(await countForTenant(schema, 'orders', attempt.tenantId)).toBe(0);
    const answers = await retryWhile(attempt.tenantId, attempt.key, attempt.body, busyOrUnavailable);
    expect(answers.slice(0, -1).some((r) => r.status === 409)).toBe(true);
    expect(isFresh(answers.at(-1)!)).toBe(true);
    await attempt.expectOneOrderOneCharge();
  });

  it('right after the Redis claim, PostgreSQL cut as the durable claim is sent: 503 + Retry-After, nothing written; the retry is 201; one order, one charge', async () => {
    const attempt = newOrder();
    const fault = pgProxy.arm({ match: PG_DURABLE_CLAIM, action: 'cut' });
    const first = await attempt.send();
    expect(fault.fired).toBe(true);
    await expectRefusedThenCreatedOnce(attempt, first);
  });

  it('at the commit, PostgreSQL cut as the completion and COMMIT are sent (nothing commits): 503 + Retry-After; after the lease the retry runs again: 201; one order, one charge', async () => {
    const attempt = newOrder();
    const fault = pgProxy.arm({ match: PG_DURABLE_COMPLETE_AND_COMMIT, action: 'cut' });
    const first = await attempt.send();
    expect(fault.fired).toBe(true);
    await expectRefusedThenCreatedOnce(attempt, first);
  });

  it('after the business commit, the reply to COMMIT lost: 503 + Retry-After; the retry, within the lease, replays the committed order (201) from the durable row; one order, one charge', async () => {
    const attempt = newOrder();
    const fault = pgProxy.arm({ match: PG_DURABLE_COMPLETE_AND_COMMIT, action: 'cut-reply' });
    const first = await attempt.send();
    expect(fault.fired).toBe(true);
    expect(first.status).toBe(503);
    expect(isRetryable(first, 'idempotency_store_unavailable')).toBe(true);
    const [committed] = await attempt.orderIds();
    expect(committed).toBeDefined();
    const retry = await attempt.send();
    expect(isReplay(retry)).toBe(true);
    expect(retry.json().id).toBe(committed);
    await attempt.expectOneOrderOneCharge();
  });

  it('after the business commit, before the fast-tier completion (Redis cut as it is sent): 201 stands; the retry, within the lease, replays that 201 from the durable row; one order, one charge', async () => {
    const attempt = newOrder();
    const fault = redisProxy.arm({ match: REDIS_COMPLETE, action: 'cut', refuse: true });
    const first = await attempt.send();
    expect(fault.fired).toBe(true);
    expect(isFresh(first)).toBe(true);
    redisProxy.restore();
    // The fast record still says "in progress" under a live lease; the durable row has the answer.
    const retry = await attempt.send();
    expect(isReplay(retry)).toBe(true);
    expect(retry.body.equals(first.body)).toBe(true);
    await attempt.expectOneOrderOneCharge();
    // The retry completed the fast record from the durable row: the next one is a fast-tier replay.
    const keyId = app.get(IdempotencyAdmin).keyIdOf({
      operation: 'orders.create',
      tenant: attempt.tenantId,
      key: attempt.key,
      scope: ['tenant', 'operation'],
    });
    expect((await app.get(IdempotencyService).store.get(keyId))?.state).toBe('completed');
    expect(isReplay(await attempt.send())).toBe(true);
  });

  it('after completion, before the response is written (the client leaves): the retry replays the committed 201 of the one order; one order, one charge', async () => {
    const attempt = newOrder();
    const fault = redisProxy.arm({ match: REDIS_COMPLETE, action: 'hold' });
    const client = postAndAbandon(url, attempt.tenantId, attempt.key, attempt.body);
    await fault.hit;
    // The transaction has committed (the fast tier follows the commit); nothing was written yet.
    client.leave();
    expect(await client.outcome).toBe('left before the answer');
    fault.release();
    const last = await attempt.retryUntilAnswered();
    expect(isReplay(last)).toBe(true);
    expect([last.json().id]).toEqual(await attempt.orderIds());
    expect(last.headers.get('location')).toBe(`/orders/${last.json().id}`);
    await attempt.expectOneOrderOneCharge();
  });

  it('a client that disconnects mid-request (handler held in its transaction): the order commits once; the retry replays its 201 (B.7 rule 17a), never a second order', async () => {
    const attempt = newOrder();
    const locker: pg.Client = await connectPostgresOrFail();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${schema}".payments IN EXCLUSIVE MODE`);
      const client = postAndAbandon(url, attempt.tenantId, attempt.key, attempt.body);
      // This schema's payments only: other suites may hold locks on tables of the same name.
      expect(await waitForLockWaiters(locker, schema, 'payments', 10_000)).toBe(1);
      client.leave();
      expect(await client.outcome).toBe('left before the answer');
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
    const last = await attempt.retryUntilAnswered();
    const [id] = await attempt.orderIds();
    expect(isReplay(last)).toBe(true);
    expect(last.status).toBe(201);
    expect(last.json().id).toBe(id);
    expect(last.headers.get('location')).toBe(`/orders/${id}`);
    await attempt.expectOneOrderOneCharge();
  });
});

/**
 * A `POST /orders` whose client can leave (destroy its socket) at a moment the test picks;
 * `outcome` says whether an answer arrived first.
 */
function postAndAbandon(baseUrl: string, tenantId: string, key: string, body: OrderBody) {
  const payload = JSON.stringify(body);
  const { hostname, port } = new URL(baseUrl);
  const req = httpRequest({
    host: hostname,
    port,
    path: '/orders',
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      'Content-Length': String(Buffer.byteLength(payload)),
      'X-Tenant-ID': tenantId,
      'Idempotency-Key': key,
    },
  });
  const outcome = new Promise<string>((resolve) => {
    req.once('response', (res) => {
      res.resume();
      resolve(`answered ${res.statusCode}`);
    });
    req.once('error', () => resolve('left before the answer'));
    req.once('close', () => resolve('left before the answer'));
  });
  req.end(payload);
  return { outcome, leave: () => req.destroy() };
}
