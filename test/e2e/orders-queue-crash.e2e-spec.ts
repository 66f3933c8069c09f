import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  buildOrdersAppOnce,
  startOrdersProcess,
  startOrdersWorkerProcess,
  type OrdersProcess,
  type OrdersWorkerProcess,
} from '../support/orders/app-process.js';
import { sleep } from '../support/timing.js';
import {
  connectPostgresOrFail,
  dropSchema,
  queryTestDatabase,
  TEST_DATABASE_URL,
  throwawaySchemaName,
  waitForLockWaiters,
} from '../support/servers/postgres.js';
import { openRedis } from '../support/servers/redis.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

/**
 * The `order.created` job redelivered after its worker was killed mid-processing. A real worker
 * process (`worker.js`) is held inside its idempotency transaction (its notification insert
 * waits on a table lock taken by the test) and SIGKILLed: PostgreSQL rolls the transaction back,
 * BullMQ's stalled-job check hands the job to a second worker, which waits out the dead claim's
 * lease (the job is moved to delayed meanwhile), takes the record over and sends the
 * confirmation. Exactly one notification exists at the end.
 */
const LEASE_MS = 1500;

describe('order.created redelivered after its worker is killed (SIGKILL) mid-processing', () => {
  let schema: string;
  let redis: ThrowawayRedis;
  let env: Record<string, string>;
  const api: OrdersProcess[] = [];
  const workers: OrdersWorkerProcess[] = [];

  const notifications = async (orderId: string) =>
    Number(
      (
        await queryTestDatabase<{ n: string }>(
          `SELECT count(*) AS n FROM "${schema}".order_notifications WHERE order_id = $1`,
          [orderId],
        )
      )[0].n,
    );

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    await buildOrdersAppOnce();
    redis = await startRedisServer();
    schema = throwawaySchemaName('queue_crash_e2e');
    env = {
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: schema,
      REDIS_URL: redis.url,
      IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      QUEUE_LOCK_MS: '1000',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
  }, 180_000);
  afterAll(async () => {
    for (const proc of [...api, ...workers]) await proc.stop();
    await redis?.stop();
    if (schema) await dropSchema(schema);
  });

  it('the second worker sends the confirmation once: one notification', async () => {
    // The API enqueues only; the workers consume.
    const server = await startOrdersProcess({ env: { ...env, QUEUE_WORKER: 'false' } });
    api.push(server);
    const first = await startOrdersWorkerProcess({ env });
    workers.push(first);

    const locker: pg.Client = await connectPostgresOrFail();
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE "${schema}".order_notifications IN EXCLUSIVE MODE`);

    const tenantId = newTenant();
    const created = await fetch(`${server.url}/orders`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Tenant-ID': tenantId, 'Idempotency-Key': randomUUID() },
      body: JSON.stringify(orderBody()),
    });
    expect(created.status).toBe(201);
    const orderId = ((await created.json()) as { id: string }).id;

    // The first worker's notification insert waits on the lock, inside its transaction.
    const waiting = await waitForLockWaiters(locker, schema, 'order_notifications', 15_000);
    expect(waiting).toBe(1);

    const exited = new Promise((resolve) => first.child.once('exit', resolve));
    first.child.kill('SIGKILL');
    await exited;
    await locker.query('ROLLBACK');
    await locker.end();
    expect(await notifications(orderId)).toBe(0);

    const second = await startOrdersWorkerProcess({ env });
    workers.push(second);
    const until = Date.now() + 20_000;
    while ((await notifications(orderId)) === 0 && Date.now() < until) await sleep(100);
    expect(await notifications(orderId)).toBe(1);

    // The job ends completed, and nothing sends a second confirmation afterwards.
    const client = await openRedis(redis.url);
    try {
      const events = await queryTestDatabase<{ id: string }>(
        `SELECT id FROM "${schema}".outbox_events WHERE order_id = $1`,
        [orderId],
      );
      expect(events).toHaveLength(1);
      const jobKey = `bull:order-events:${events[0].id}`;
      const finishedBy = Date.now() + 10_000;
      while ((await client.hget(jobKey, 'finishedOn')) === null && Date.now() < finishedBy) await sleep(100);
      expect(await client.zscore('bull:order-events:completed', events[0].id)).not.toBeNull();
      expect(Number(await client.hget(jobKey, 'stc'))).toBe(1);
    } finally {
      await client.quit();
    }
    // The second worker took the dead run's record over (a new owner token, fencing counter 2).
    expect(second.output()).toMatch(/takeover of a dead lease .*fencing=2/);
    await sleep(1000);
    expect(await notifications(orderId)).toBe(1);
    const listed = await fetch(`${server.url}/orders/${orderId}/notifications`, {
      headers: { 'X-Tenant-ID': tenantId },
    });
    expect(((await listed.json()) as unknown[]).length).toBe(1);
  }, 90_000);
});
