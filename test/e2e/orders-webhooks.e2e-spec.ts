import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { signWebhookBody } from '../../apps/orders/src/webhooks/webhook-signature.js';
import { send, type HttpResult } from '../support/http/send.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { newTenant, orderBody, PROBLEM_BASE } from '../support/orders/orders-fixtures.js';

const SECRET = 'whsec_e2e_0123456789abcdef';

/**
 * `POST /webhooks/payments` and `GET /payments/:id/events` on a real socket, on both backends:
 * signature first, each event id applied once (in parallel and in sequence), the tenant taken
 * from the payment, unknown payments not recorded.
 */
describe.each(backends)('payment webhooks on %s', (_name, setUp) => {
  let backend: Backend | undefined;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    backend = await setUp();
    app = await createOrdersApp({ env: { ...backend.env, WEBHOOK_SECRET: SECRET }, logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  /** A tenant with one paid order; returns the tenant and the order's payment id. */
  const paidOrder = async () => {
    const tenantId = newTenant();
    const created = await send(url, '/orders', {
      key: randomUUID(),
      body: orderBody(),
      headers: { 'X-Tenant-ID': tenantId },
    });
    expect(created.status).toBe(201);
    return { tenantId, paymentId: created.json<{ paymentId: string }>().paymentId };
  };
  const eventBody = (paymentId: string, type = 'payment.settled', id = `evt_${randomUUID()}`) =>
    JSON.stringify({ id, type, data: { paymentId } });
  /** Delivers `body` signed with the secret, or with `signature` (`null`: no X-Signature at all). */
  const deliver = (
    body: string,
    signature: string | null = signWebhookBody(body, SECRET),
    headers: Record<string, string> = {},
  ) =>
    send(url, '/webhooks/payments', {
      body,
      headers: { ...(signature === null ? {} : { 'X-Signature': signature }), ...headers },
    });
  const eventsOf = async (tenantId: string, paymentId: string) => {
    const res = await send(url, `/payments/${paymentId}/events`, {
      method: 'GET',
      headers: { 'X-Tenant-ID': tenantId },
    });
    expect(res.status).toBe(200);
    return res.json<{ id: string; type: string; paymentId: string; receivedAt: string }[]>();
  };
  const statusOf = async (tenantId: string, paymentId: string) => {
    const res = await send(url, '/payments', { method: 'GET', headers: { 'X-Tenant-ID': tenantId } });
    return res.json<{ id: string; status: string }[]>().find((p) => p.id === paymentId)?.status;
  };
  const expectProblem = (res: HttpResult, status: number, kind: string) => {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ type: PROBLEM_BASE + kind, status });
  };

  it('a signed event is applied: 200, listed on its payment, and the payment is settled', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const body = eventBody(paymentId);
    const res = await deliver(body);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ received: true, duplicate: false });
    const events = await eventsOf(tenantId, paymentId);
    expect(events).toEqual([
      { id: JSON.parse(body).id, type: 'payment.settled', paymentId, receivedAt: expect.any(String) },
    ]);
    expect(new Date(events[0].receivedAt).toISOString()).toBe(events[0].receivedAt);
    expect(await statusOf(tenantId, paymentId)).toBe('settled');
  });

  it('the same event delivered 5 times in parallel is applied once; every delivery gets 200', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const body = eventBody(paymentId);
    const results = await Promise.all(Array.from({ length: 5 }, () => deliver(body)));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(results.filter((r) => r.json().duplicate === false)).toHaveLength(1);
    expect(results.filter((r) => r.json().duplicate === true)).toHaveLength(4);
    expect(await eventsOf(tenantId, paymentId)).toHaveLength(1);
  });

  it('the same event delivered 5 times in sequence is applied once; the others are 200 duplicates', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const body = eventBody(paymentId);
    const bodies: unknown[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await deliver(body);
      expect(res.status).toBe(200);
      bodies.push(res.json());
    }
    expect(bodies).toEqual([
      { received: true, duplicate: false },
      ...Array.from({ length: 4 }, () => ({ received: true, duplicate: true })),
    ]);
    expect(await eventsOf(tenantId, paymentId)).toHaveLength(1);
  });

  it('a forged signature is 401 and nothing is applied or recorded: the genuine delivery is applied afterwards', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const body = eventBody(paymentId);
    expectProblem(await deliver(body, signWebhookBody(body, 'not-the-secret-0000')), 401, 'webhook-signature-invalid');
    const tampered = body.replace('payment.settled', 'payment.refunded');
    expectProblem(await deliver(tampered, signWebhookBody(body, SECRET)), 401, 'webhook-signature-invalid');
    expectProblem(await deliver(body, 'sha256=not-hex'), 401, 'webhook-signature-invalid');
    expect(await eventsOf(tenantId, paymentId)).toEqual([]);
    expect(await statusOf(tenantId, paymentId)).toBe('charged');
    expect((await deliver(body)).json()).toEqual({ received: true, duplicate: false });
    expect(await eventsOf(tenantId, paymentId)).toHaveLength(1);
  });

  it('a missing signature is 401, checked before the body is read (even an invalid body)', async () => {
    const { tenantId, paymentId } = await paidOrder();
    expectProblem(await deliver(eventBody(paymentId), null), 401, 'webhook-signature-invalid');
    expectProblem(await deliver('{"not":"an event"}', null), 401, 'webhook-signature-invalid');
    expectProblem(await deliver('{oops', null), 400, 'invalid-json');
    expect(await eventsOf(tenantId, paymentId)).toEqual([]);
  });

  it('needs no X-Tenant-ID, and one that is sent (even another tenant, even invalid) changes nothing', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const first = eventBody(paymentId, 'payment.settled');
    const second = eventBody(paymentId, 'payment.refunded');
    expect((await deliver(first, null, { 'X-Tenant-ID': tenantId })).status).toBe(401);
    expect((await deliver(first, signWebhookBody(first, SECRET), { 'X-Tenant-ID': newTenant() })).status).toBe(200);
    expect((await deliver(second, signWebhookBody(second, SECRET), { 'X-Tenant-ID': 'not-a-uuid' })).status).toBe(200);
    expect((await eventsOf(tenantId, paymentId)).map((e) => e.type)).toEqual(['payment.settled', 'payment.refunded']);
    expect(await statusOf(tenantId, paymentId)).toBe('refunded');
  });

  it('statuses only move forward: a late payment.settled after payment.refunded is recorded but keeps refunded', async () => {
    const { tenantId, paymentId } = await paidOrder();
    expect((await deliver(eventBody(paymentId, 'payment.refunded'))).status).toBe(200);
    expect((await deliver(eventBody(paymentId, 'payment.settled'))).status).toBe(200);
    expect((await eventsOf(tenantId, paymentId)).map((e) => e.type)).toEqual(['payment.refunded', 'payment.settled']);
    expect(await statusOf(tenantId, paymentId)).toBe('refunded');
  });

  it('an unknown payment is 404 and not recorded: the same event id is applied once the payment is known', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const id = `evt_${randomUUID()}`;
    expectProblem(await deliver(eventBody(randomUUID(), 'payment.settled', id)), 404, 'not-found');
    expectProblem(await deliver(eventBody('not-a-uuid', 'payment.settled', id)), 404, 'not-found');
    const res = await deliver(eventBody(paymentId, 'payment.settled', id));
    expect(res.json()).toEqual({ received: true, duplicate: false });
    expect((await eventsOf(tenantId, paymentId)).map((e) => e.id)).toEqual([id]);
  });

  it('another body under an applied event id is 422 webhook-event-reused, nothing applied', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const id = `evt_${randomUUID()}`;
    expect((await deliver(eventBody(paymentId, 'payment.settled', id))).status).toBe(200);
    expectProblem(await deliver(eventBody(paymentId, 'payment.refunded', id)), 422, 'webhook-event-reused');
    expect((await eventsOf(tenantId, paymentId)).map((e) => e.type)).toEqual(['payment.settled']);
    expect(await statusOf(tenantId, paymentId)).toBe('settled');
  });

  it('a signed but invalid event is 400 validation-error; an unsupported type is acknowledged, not applied', async () => {
    const { tenantId, paymentId } = await paidOrder();
    const invalid = JSON.stringify({ id: 'evt_x', type: 'payment.settled', data: {} });
    const res = await deliver(invalid);
    expectProblem(res, 400, 'validation-error');
    expect(res.json().errors).toEqual([{ field: 'data.paymentId', messages: [expect.any(String)] }]);
    const unsupported = JSON.stringify({ id: `evt_${randomUUID()}`, type: 'payment.disputed', data: { paymentId } });
    const ack = await deliver(unsupported);
    expect(ack.status).toBe(200);
    expect(ack.json()).toEqual({ received: true, duplicate: false, ignored: true });
    expect(await eventsOf(tenantId, paymentId)).toEqual([]);
  });

  it("GET /payments/:id/events is tenant-scoped: another tenant's payment or a non-UUID is 404; no tenant is 400", async () => {
    const { paymentId } = await paidOrder();
    const other = await send(url, `/payments/${paymentId}/events`, {
      method: 'GET',
      headers: { 'X-Tenant-ID': newTenant() },
    });
    expectProblem(other, 404, 'not-found');
    expectProblem(
      await send(url, '/payments/nope/events', { method: 'GET', headers: { 'X-Tenant-ID': newTenant() } }),
      404,
      'not-found',
    );
    expectProblem(await send(url, `/payments/${paymentId}/events`, { method: 'GET' }), 400, 'tenant-required');
  });
});

describe('payment webhooks without WEBHOOK_SECRET', () => {
  it('answer 503 webhooks-disabled, signed or not', async () => {
    const [, setUp] = backends[1];
    const backend = await setUp();
    const app = await createOrdersApp({ env: backend.env, logger: false });
    try {
      await app.listen(0, '127.0.0.1');
      const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
      const body = JSON.stringify({ id: 'evt_1', type: 'payment.settled', data: { paymentId: randomUUID() } });
      for (const headers of [{}, { 'X-Signature': signWebhookBody(body, SECRET) }] as Record<string, string>[]) {
        const res = await send(url, '/webhooks/payments', { body, headers });
        expect(res.status).toBe(503);
        expect(res.json()).toMatchObject({ type: `${PROBLEM_BASE}webhooks-disabled`, code: 'webhooks_disabled' });
      }
    } finally {
      await app.close();
      await backend.tearDown();
    }
  });
});
