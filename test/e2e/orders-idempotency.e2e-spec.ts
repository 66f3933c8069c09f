import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { expectOneFreshTheRestBusyOrReplayed } from '../support/http/concurrency.js';
import { send, type HttpResult } from '../support/http/send.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { newTenant, orderBody, PROBLEM_BASE } from '../support/orders/orders-fixtures.js';

/** `POST /orders` under the HTTP contract (docs/contract.md B.1–B.11), on both backends. */
describe.each(backends)('POST /orders idempotency on %s', (_name, setUp) => {
  let backend: Backend | undefined;
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    backend = await setUp();
    app = await createOrdersApp({ env: backend.env, logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  const order = (tenantId: string, key: string | undefined, body: unknown = orderBody()) =>
    send(url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
  const payments = async (tenantId: string) =>
    (await send(url, '/payments', { method: 'GET', headers: { 'X-Tenant-ID': tenantId } })).json<unknown[]>();
  const orders = async (tenantId: string) =>
    (await send(url, '/orders', { method: 'GET', headers: { 'X-Tenant-ID': tenantId } })).json<unknown[]>();
  const expectProblem = (res: HttpResult, status: number, kind: string) => {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ type: PROBLEM_BASE + kind, status });
  };

  it('a retried order is charged once, and the replay is the same 201 marked Idempotent-Replayed', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const first = await order(tenantId, key, body);
    const retry = await order(tenantId, key, body);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    expect(retry.headers.get('location')).toBe(first.headers.get('location'));
    expect(retry.headers.get('idempotency-key')).toBe(key);
    expect(await orders(tenantId)).toHaveLength(1);
    const charges = await payments(tenantId);
    expect(charges).toHaveLength(1);
    expect((charges[0] as { providerKey: string }).providerKey).toMatch(/^idk_/);
  });

  it('requires the key: 400 idempotency-key-missing, nothing written', async () => {
    const tenantId = newTenant();
    expectProblem(await order(tenantId, undefined), 400, 'idempotency-key-missing');
    expect(await orders(tenantId)).toHaveLength(0);
  });

  it('an invalid key is 400 idempotency-key-invalid, nothing written', async () => {
    const tenantId = newTenant();
    expectProblem(await order(tenantId, 'a b'), 400, 'idempotency-key-invalid');
    expect(await orders(tenantId)).toHaveLength(0);
  });

  it('the same key with another payload is 422 idempotency-key-reused, nothing written', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    await order(tenantId, key, orderBody({ currency: 'USD' }));
    expectProblem(await order(tenantId, key, orderBody({ currency: 'EUR' })), 422, 'idempotency-key-reused');
    expect(await orders(tenantId)).toHaveLength(1);
    expect(await payments(tenantId)).toHaveLength(1);
  });

  it('JSON key order and whitespace do not make a new payload', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const reordered = JSON.stringify(Object.fromEntries(Object.entries(body).reverse()), null, 2);
    await order(tenantId, key, JSON.stringify(body));
    const retry = await order(tenantId, key, reordered);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
  });

  it('the same key from another tenant is another order', async () => {
    const key = randomUUID();
    const [a, b] = [newTenant(), newTenant()];
    const first = await order(a, key);
    const second = await order(b, key);
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBeNull();
    expect(second.json().id).not.toBe(first.json().id);
    expect(await orders(a)).toHaveLength(1);
    expect(await orders(b)).toHaveLength(1);
  });

  it('a validation 400 produced inside the layer is stored and replayed (B.7 rule 17)', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const first = await order(tenantId, key, { coupon: 'x' });
    const retry = await order(tenantId, key, { coupon: 'x' });
    expect(first.status).toBe(400);
    expect(retry.status).toBe(400);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
  });

  it('50 concurrent identical orders with one key: one order, one charge; the rest 409 with Retry-After or replays', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const results = await Promise.all(Array.from({ length: 50 }, () => order(tenantId, key, body)));
    expectOneFreshTheRestBusyOrReplayed(results);
    expect(await orders(tenantId)).toHaveLength(1);
    expect(await payments(tenantId)).toHaveLength(1);
  });
});
