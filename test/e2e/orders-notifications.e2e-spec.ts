import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { IsNull } from 'typeorm';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { TransactionRunner } from '../../apps/orders/src/database/transaction-runner.js';
import { OutboxEvent } from '../../apps/orders/src/events/outbox-event.entity.js';
import { OutboxRelay } from '../../apps/orders/src/events/outbox.relay.js';
import { send, type HttpResult } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { newTenant, orderBody, PROBLEM_BASE } from '../support/orders/orders-fixtures.js';

interface NotificationView {
  id: string;
  orderId: string;
  kind: string;
  eventId: string;
  sentAt: string;
}

/**
 * `order.created` → one confirmation per order, on both backends: through BullMQ (PostgreSQL +
 * Redis, the worker in this process) and in-process after the commit (embedded defaults). The
 * outbox is dispatched at least once; the confirmation is sent once.
 */
describe.each(backends)('order confirmations on %s', (_name, setUp) => {
  let backend: Backend | undefined;
  let app: INestApplication;
  let url: string;
  let db: TransactionRunner;

  beforeAll(async () => {
    backend = await setUp();
    app = await createOrdersApp({ env: { ...backend.env, OUTBOX_POLL_MS: '200' }, logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    db = app.get(TransactionRunner);
  });
  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  const createOrder = async (tenantId: string, key = randomUUID(), body = orderBody()) => {
    const res = await send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
    expect(res.status).toBe(201);
    return res.json<{ id: string }>().id;
  };
  const notificationsOf = (tenantId: string, orderId: string): Promise<HttpResult> =>
    send(url, `/orders/${orderId}/notifications`, { method: 'GET', headers: { 'X-Tenant-ID': tenantId } });
  /** Polls until the order has `count` notifications (fails after 10 s), then returns them. */
  const waitForNotifications = async (tenantId: string, orderId: string, count = 1) => {
    const deadline = Date.now() + 10_000;
    let list: NotificationView[] = [];
    while (Date.now() < deadline) {
      const res = await notificationsOf(tenantId, orderId);
      expect(res.status).toBe(200);
      list = res.json<NotificationView[]>();
      if (list.length >= count) break;
      await sleep(50);
    }
    expect(list).toHaveLength(count);
    return list;
  };
  const pendingOutbox = () => db.read((manager) => manager.countBy(OutboxEvent, { dispatchedAtMs: IsNull() }));
  /** Waits until the relay has dispatched everything (and the jobs had time to run). */
  const settle = async () => {
    const deadline = Date.now() + 10_000;
    while ((await pendingOutbox()) > 0 && Date.now() < deadline) await sleep(50);
    await app.get(OutboxRelay).idle();
    await sleep(300);
  };

  it('a new order gets one confirmation, for its order.created event', async () => {
    const tenantId = newTenant();
    const orderId = await createOrder(tenantId);
    const [notification] = await waitForNotifications(tenantId, orderId);
    expect(notification).toEqual({
      id: expect.any(String),
      orderId,
      kind: 'order-confirmation',
      eventId: expect.any(String),
      sentAt: expect.stringMatching(/Z$/),
    });
    const event = await db.read((manager) => manager.findOneByOrFail(OutboxEvent, { orderId }));
    expect(event).toMatchObject({ id: notification.eventId, type: 'order.created', tenantId });
    expect(event.dispatchedAtMs).toEqual(expect.any(Number));
  });

  it('a replayed POST /orders publishes nothing new: still one confirmation', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const orderId = await createOrder(tenantId, key, body);
    await waitForNotifications(tenantId, orderId);
    expect(await createOrder(tenantId, key, body)).toBe(orderId);
    await settle();
    await waitForNotifications(tenantId, orderId, 1);
    expect(await db.read((manager) => manager.countBy(OutboxEvent, { orderId }))).toBe(1);
  });

  it('an event dispatched again (the relay died before marking it) is still one confirmation', async () => {
    const tenantId = newTenant();
    const orderId = await createOrder(tenantId);
    const [first] = await waitForNotifications(tenantId, orderId);
    for (let i = 0; i < 3; i++) {
      await db.transaction((manager) => manager.update(OutboxEvent, { orderId }, { dispatchedAtMs: null }));
      app.get(OutboxRelay).kick();
      await settle();
    }
    expect(await waitForNotifications(tenantId, orderId, 1)).toEqual([first]);
  });

  it('an event whose process died between the commit and the dispatch is dispatched by the next scan', async () => {
    const tenantId = newTenant();
    const orderId = await createOrder(tenantId);
    await waitForNotifications(tenantId, orderId);
    // As if another order.created of this order had committed and its process had died at once.
    const eventId = randomUUID();
    await db.transaction((manager) =>
      manager.insert(OutboxEvent, {
        id: eventId,
        type: 'order.created',
        tenantId,
        orderId,
        createdAtMs: Date.now(),
        dispatchedAtMs: null,
      }),
    );
    const list = await waitForNotifications(tenantId, orderId, 2);
    expect(list.map((n) => n.eventId)).toContain(eventId);
  });

  it('GET /orders/:id/notifications is tenant-scoped: 404 for another tenant or a non-UUID, 400 without tenant', async () => {
    const tenantId = newTenant();
    const orderId = await createOrder(tenantId);
    const expectProblem = (res: HttpResult, status: number, kind: string) => {
      expect(res.status).toBe(status);
      expect(res.json()).toMatchObject({ type: PROBLEM_BASE + kind, status });
    };
    expectProblem(await notificationsOf(newTenant(), orderId), 404, 'not-found');
    expectProblem(await notificationsOf(tenantId, 'nope'), 404, 'not-found');
    expectProblem(await send(url, `/orders/${orderId}/notifications`, { method: 'GET' }), 400, 'tenant-required');
  });
});
