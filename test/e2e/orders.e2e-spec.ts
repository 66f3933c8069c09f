import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { ProblemException } from '../../apps/orders/src/common/problem-details/problem-details.js';
import { TransactionRunner } from '../../apps/orders/src/database/transaction-runner.js';
import { OrdersService } from '../../apps/orders/src/orders/orders.service.js';
import { Payment } from '../../apps/orders/src/payments/payment.entity.js';
import { PaymentKeyReusedError, PaymentsService } from '../../apps/orders/src/payments/payments.service.js';
import { backends, type Backend } from '../support/orders/backends.js';
import {
  newTenant,
  ORDER_KEYS,
  orderBody,
  PAYMENT_KEYS,
  PROBLEM_BASE,
  UUID_RE,
  withFirstItem,
} from '../support/orders/orders-fixtures.js';
import { RecordingLogger } from '../support/recording-logger.js';

describe.each(backends)('orders service on %s', (_name, setUp) => {
  let backend: Backend | undefined;
  let app: INestApplication;
  let http: ReturnType<typeof request>;
  const logger = new RecordingLogger();

  beforeAll(async () => {
    backend = await setUp();
    app = await createOrdersApp({ env: backend.env, logger });
    // A probe behind the app's body parser: what the idempotency layer will see of a request.
    app
      .getHttpAdapter()
      .getInstance()
      .post('/__test/raw-body', (req: { rawBody?: Buffer; body: unknown }, res: { json(v: unknown): void }) =>
        res.json({ raw: req.rawBody?.toString('utf8') ?? null, parsed: req.body }),
      );
    await app.listen(0, '127.0.0.1');
    http = request(await app.getUrl());
  });

  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  /** `POST /orders` with a fresh Idempotency-Key (the route requires one). */
  const post = (tenantId: string, body: unknown, key: string = randomUUID()) =>
    http
      .post('/orders')
      .set('X-Tenant-ID', tenantId)
      .set('Idempotency-Key', key)
      .set('Content-Type', 'application/json')
      .send(body as object);

  const expectProblem = (res: request.Response, status: number, slug: string) => {
    expect(res.status).toBe(status);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.body).toMatchObject({ type: PROBLEM_BASE + slug, status });
    expect(typeof res.body.title).toBe('string');
    expect(typeof res.body.detail).toBe('string');
  };

  it('logs one startup line naming its backends', () => {
    const lines = logger.at('log').filter((line) => line.startsWith('Backends: '));
    expect(lines).toEqual([
      backend!.usesRedis
        ? expect.stringMatching(/^Backends: database = PostgreSQL .*; fast store = Redis redis:\/\/127\.0\.0\.1:6379 /)
        : expect.stringMatching(/^Backends: database = embedded sql\.js file .*orders\.sqlite; fast store = in-memory/),
    ]);
  });

  describe('GET /health', () => {
    it('answers 200 with the status of each backend, and nothing more, without a tenant or a token', async () => {
      const res = await http.get('/health');
      expect(res.status).toBe(200);
      expect(res.body.status).toBe('ok');
      expect(res.body.details).toEqual({
        database: { status: 'up' },
        idempotency: { status: 'up', fast: { status: 'up' }, durable: { status: 'up' } },
        ...(backend!.usesRedis && { redis: { status: 'up' } }),
      });
      expect(res.body.info).toEqual(res.body.details);
    });
  });

  describe('POST /orders', () => {
    it('answers 201 with Location and the paid order', async () => {
      const tenantId = newTenant();
      const body = orderBody();
      const before = Date.now();
      const res = await post(tenantId, body);

      expect(res.status).toBe(201);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(Object.keys(res.body)).toEqual(ORDER_KEYS);
      expect(res.body).toEqual({
        id: expect.stringMatching(UUID_RE),
        tenantId,
        customerId: body.customerId,
        currency: 'EUR',
        items: body.items,
        totalCents: 2 * 1999 + 3 * 250,
        status: 'paid',
        paymentId: expect.stringMatching(UUID_RE),
        createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      });
      expect(res.headers.location).toBe(`/orders/${res.body.id}`);
      expect(Date.parse(res.body.createdAt)).toBeGreaterThanOrEqual(before - 5);
      expect(res.headers['access-control-expose-headers']).toContain('Location');
    });

    it('keeps totals above 2^31 exact', async () => {
      const items = [
        { sku: 'GOLD', quantity: 1000, unitPriceCents: 100_000_000 },
        { sku: 'GOLD-2', quantity: 999, unitPriceCents: 99_999_999 },
      ];
      const res = await post(newTenant(), orderBody({ items }));
      expect(res.status).toBe(201);
      expect(res.body.totalCents).toBe(100_000_000_000 + 99_899_999_001);
      expect(res.text).toContain('"totalCents":199899999001');
    });

    it('accepts the boundaries: 1 and 100 items, quantity 1 and 1000, price 0, sku of 1 and 64 chars', async () => {
      const one = await post(newTenant(), orderBody({ items: [{ sku: 'x', quantity: 1, unitPriceCents: 0 }] }));
      expect(one.status).toBe(201);
      expect(one.body.totalCents).toBe(0);
      const items = Array.from({ length: 100 }, (_, i) => ({
        sku: `S${i}`.padEnd(64, '-'),
        quantity: 1000,
        unitPriceCents: i,
      }));
      const hundred = await post(newTenant(), orderBody({ currency: 'GBP', items }));
      expect(hundred.status).toBe(201);
      expect(hundred.body.items).toEqual(items);
    });

    it('charges the order through the payments module, in the same request', async () => {
      const tenantId = newTenant();
      const order = (await post(tenantId, orderBody({ currency: 'USD' }))).body;
      const res = await http.get('/payments').set('X-Tenant-ID', tenantId);
      expect(res.status).toBe(200);
      expect(res.body).toHaveLength(1);
      expect(Object.keys(res.body[0])).toEqual(PAYMENT_KEYS);
      expect(res.body[0]).toEqual({
        id: order.paymentId,
        orderId: order.id,
        amountCents: order.totalCents,
        currency: 'USD',
        providerKey: expect.any(String),
        status: 'charged',
        createdAt: expect.stringMatching(/Z$/),
      });
      expect(res.body[0].providerKey.length).toBeGreaterThan(0);
    });
  });

  describe('POST /orders validation', () => {
    const cases: [string, unknown, string[]][] = [
      ['an unknown field', { ...orderBody(), coupon: 'FREE' }, ['coupon']],
      ['an unknown item field', withFirstItem({ color: 'red' }), ['items.0.color']],
      ['a currency outside USD/EUR/GBP', orderBody({ currency: 'JPY' }), ['currency']],
      ['a lower-case currency', orderBody({ currency: 'eur' }), ['currency']],
      ['no items', orderBody({ items: [] }), ['items']],
      [
        '101 items',
        orderBody({ items: Array.from({ length: 101 }, () => ({ sku: 'A', quantity: 1, unitPriceCents: 1 })) }),
        ['items'],
      ],
      ['items that are not an array', { ...orderBody(), items: 'many' }, ['items']],
      ['quantity 0', withFirstItem({ quantity: 0 }), ['items.0.quantity']],
      ['quantity 1001', withFirstItem({ quantity: 1001 }), ['items.0.quantity']],
      ['quantity 1.5', withFirstItem({ quantity: 1.5 }), ['items.0.quantity']],
      ['quantity "2" (a string)', withFirstItem({ quantity: '2' }), ['items.0.quantity']],
      ['a negative unit price', withFirstItem({ unitPriceCents: -1 }), ['items.0.unitPriceCents']],
      ['a unit price above 100000000', withFirstItem({ unitPriceCents: 100_000_001 }), ['items.0.unitPriceCents']],
      ['an empty sku', withFirstItem({ sku: '' }), ['items.0.sku']],
      ['a sku of 65 chars', withFirstItem({ sku: 'x'.repeat(65) }), ['items.0.sku']],
      ['a customerId that is not a UUID', orderBody({ customerId: 'cust-42' }), ['customerId']],
      ['an empty object', {}, ['customerId', 'currency', 'items']],
      [
        'several bad fields at once',
        {
          customerId: 1,
          currency: 'EUR',
          items: [
            { sku: 'A', quantity: 0, unitPriceCents: 1 },
            { sku: 'B', quantity: 1 },
          ],
        },
        ['customerId', 'items.0.quantity', 'items.1.unitPriceCents'],
      ],
    ];

    it.each(cases)('answers 400 validation-error for %s, listing the fields', async (_case, body, fields) => {
      const res = await post(newTenant(), body);
      expectProblem(res, 400, 'validation-error');
      expect(res.body.code).toBe('validation_error');
      expect(res.body.errors.map((e: { field: string }) => e.field)).toEqual(fields);
      for (const error of res.body.errors) {
        expect(error.messages.length).toBeGreaterThan(0);
      }
    });

    it.each([
      ['an array', '[]'],
      ['a string', '"an order"'],
      ['a number', '42'],
      ['null', 'null'],
    ])('answers 400 validation-error when the body is %s, not an object', async (_case, raw) => {
      const res = await post(newTenant(), raw);
      expectProblem(res, 400, 'validation-error');
      expect(res.body.detail).toBe('The request body must be a JSON object.');
    });

    it('answers 400 validation-error when there is no JSON body at all', async () => {
      const res = await http
        .post('/orders')
        .set('X-Tenant-ID', newTenant())
        .set('Idempotency-Key', randomUUID())
        .set('Content-Type', 'text/plain')
        .send('hello');
      expectProblem(res, 400, 'validation-error');
    });

    it('answers 400 invalid-json for malformed JSON, without echoing it', async () => {
      const res = await post(newTenant(), '{"customerId": "abc", secret-sauce');
      expectProblem(res, 400, 'invalid-json');
      expect(res.body.code).toBe('invalid_json');
      expect(res.text).not.toContain('secret-sauce');
    });

    it('answers 413 problem details (about:blank) for a body over 100 kB', async () => {
      const res = await post(newTenant(), { ...orderBody(), note: 'x'.repeat(110_000) });
      expect(res.status).toBe(413);
      expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(res.body).toEqual({
        type: 'about:blank',
        title: 'Payload Too Large',
        status: 413,
        detail: 'request entity too large',
      });
    });

    it('keeps the exact request bytes (rawBody) beside the parsed body, for the idempotency layer', async () => {
      const raw = '{ "b": 1,\n  "a": [2, 3] }';
      const res = await http.post('/__test/raw-body').set('Content-Type', 'application/json').send(raw);
      expect(res.body).toEqual({ raw, parsed: { b: 1, a: [2, 3] } });
    });

    it('writes nothing for a refused order', async () => {
      const tenantId = newTenant();
      await post(tenantId, withFirstItem({ quantity: 0 }));
      expect((await http.get('/orders').set('X-Tenant-ID', tenantId)).body).toEqual([]);
      expect((await http.get('/payments').set('X-Tenant-ID', tenantId)).body).toEqual([]);
    });
  });

  describe('X-Tenant-ID', () => {
    const routes: [string, string][] = [
      ['post', '/orders'],
      ['get', '/orders'],
      ['get', `/orders/${randomUUID()}`],
      ['get', '/payments'],
    ];

    it.each(routes)('%s %s without it answers 400 tenant-required', async (method, path) => {
      const res = await (method === 'post' ? http.post(path).send(orderBody()) : http.get(path));
      expectProblem(res, 400, 'tenant-required');
      expect(res.body.code).toBe('tenant_required');
    });

    it.each(routes)('%s %s with a non-UUID answers 400 tenant-invalid', async (method, path) => {
      const res = await (method === 'post' ? http.post(path).send(orderBody()) : http.get(path)).set(
        'X-Tenant-ID',
        'acme',
      );
      expectProblem(res, 400, 'tenant-invalid');
    });

    it('is checked before the body', async () => {
      const res = await http.post('/orders').set('Content-Type', 'application/json').send({ coupon: 1 });
      expectProblem(res, 400, 'tenant-required');
    });

    it('is case-insensitive: an upper-case UUID names the same tenant', async () => {
      const tenantId = newTenant();
      const created = await post(tenantId.toUpperCase(), orderBody());
      expect(created.body.tenantId).toBe(tenantId);
      const list = await http.get('/orders').set('X-Tenant-ID', tenantId);
      expect(list.body.map((o: { id: string }) => o.id)).toEqual([created.body.id]);
    });
  });

  describe('GET /orders/:id', () => {
    it('answers 200 with the order as it was created', async () => {
      const tenantId = newTenant();
      const created = await post(tenantId, orderBody());
      const res = await http.get(created.headers.location).set('X-Tenant-ID', tenantId);
      expect(res.status).toBe(200);
      expect(res.body).toEqual(created.body);
      const upper = await http.get(`/orders/${created.body.id.toUpperCase()}`).set('X-Tenant-ID', tenantId);
      expect(upper.body).toEqual(created.body);
    });

    it('answers 404 not-found for another tenant’s order, an unknown id and a non-UUID id', async () => {
      const owner = newTenant();
      const created = await post(owner, orderBody());
      for (const [tenantId, path] of [
        [newTenant(), `/orders/${created.body.id}`],
        [owner, `/orders/${randomUUID()}`],
        [owner, '/orders/not-a-uuid'],
      ]) {
        const res = await http.get(path).set('X-Tenant-ID', tenantId);
        expectProblem(res, 404, 'not-found');
        expect(res.text).not.toContain(owner);
      }
    });
  });

  describe('lists', () => {
    it('GET /orders and GET /payments list the tenant’s own rows only, newest first', async () => {
      const tenantId = newTenant();
      const other = newTenant();
      const created: { id: string; paymentId: string }[] = [];
      for (let i = 0; i < 4; i++) {
        created.push(
          (await post(tenantId, orderBody({ items: [{ sku: `N${i}`, quantity: 1, unitPriceCents: i }] }))).body,
        );
        await post(other, orderBody());
      }

      const orders = await http.get('/orders').set('X-Tenant-ID', tenantId);
      expect(orders.status).toBe(200);
      expect(orders.body.map((o: { id: string }) => o.id)).toEqual(created.map((o) => o.id).reverse());
      expect(orders.body.map((o: { items: { sku: string }[] }) => o.items[0].sku)).toEqual(['N3', 'N2', 'N1', 'N0']);
      const times = orders.body.map((o: { createdAt: string }) => Date.parse(o.createdAt));
      expect([...times].sort((a, b) => b - a)).toEqual(times);

      const payments = await http.get('/payments').set('X-Tenant-ID', tenantId);
      expect(payments.status).toBe(200);
      expect(payments.body.map((p: { id: string }) => p.id)).toEqual(created.map((o) => o.paymentId).reverse());
      expect(payments.body.map((p: { orderId: string }) => p.orderId)).toEqual(created.map((o) => o.id).reverse());
    });

    it('are empty arrays for a tenant without orders', async () => {
      const tenantId = newTenant();
      for (const path of ['/orders', '/payments']) {
        const res = await http.get(path).set('X-Tenant-ID', tenantId);
        expect(res.status).toBe(200);
        expect(res.body).toEqual([]);
      }
    });
  });

  describe('transactions and the payment provider key', () => {
    it('the provider charges one key once: same charge → the first charge, other charge → refused', async () => {
      const payments = app.get(PaymentsService);
      const db = app.get(TransactionRunner);
      const charge = {
        tenantId: newTenant(),
        orderId: randomUUID(),
        amountCents: 500,
        currency: 'EUR' as const,
        providerKey: randomUUID(),
      };
      const first = await db.transaction(() => payments.charge(charge));
      const again = await db.transaction(() => payments.charge(charge));
      expect(again.id).toBe(first.id);
      await expect(db.transaction(() => payments.charge({ ...charge, amountCents: 501 }))).rejects.toBeInstanceOf(
        PaymentKeyReusedError,
      );
      const rows = await app.get(DataSource).getRepository(Payment).countBy({ providerKey: charge.providerKey });
      expect(rows).toBe(1);
    });

    it('an order whose charge is refused leaves no order behind (one transaction)', async () => {
      const orders = app.get(OrdersService);
      const tenantId = newTenant();
      const first = await orders.create(tenantId, orderBody() as never, { providerKey: 'key-used-once' + tenantId });
      const retry = orders.create(tenantId, orderBody() as never, { providerKey: 'key-used-once' + tenantId });
      await expect(retry).rejects.toBeInstanceOf(ProblemException);
      await expect(retry).rejects.toMatchObject({ status: 409 });
      const list = await http.get('/orders').set('X-Tenant-ID', tenantId);
      expect(list.body.map((o: { id: string }) => o.id)).toEqual([first.id]);
    });

    it('create() joins the transaction it runs in (TransactionHost), and rolls back with it', async () => {
      const orders = app.get(OrdersService);
      const tenantId = newTenant();
      const rollback = new Error('caller rolls back');
      await expect(
        app.get(TransactionRunner).transaction(async () => {
          const order = await orders.create(tenantId, orderBody() as never, { providerKey: randomUUID() });
          expect(order.status).toBe('paid');
          throw rollback;
        }),
      ).rejects.toBe(rollback);
      expect((await http.get('/orders').set('X-Tenant-ID', tenantId)).body).toEqual([]);
      expect((await http.get('/payments').set('X-Tenant-ID', tenantId)).body).toEqual([]);
    });

    it('overlapping transactions stay apart: the refused ones roll back alone', async () => {
      const orders = app.get(OrdersService);
      const tenantId = newTenant();
      const usedKey = `used-${tenantId}`;
      await orders.create(tenantId, orderBody() as never, { providerKey: usedKey });
      const attempts = Array.from({ length: 12 }, (_, i) =>
        orders.create(tenantId, orderBody() as never, { providerKey: i % 2 === 0 ? randomUUID() : usedKey }),
      );
      const settled = await Promise.allSettled(attempts);
      const created = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value.id] : []));
      const refused = settled.filter((r) => r.status === 'rejected');
      expect(created).toHaveLength(6);
      expect(refused.map((r) => (r as PromiseRejectedResult).reason.status)).toEqual(Array(6).fill(409));
      const listed = (await http.get('/orders').set('X-Tenant-ID', tenantId)).body.map((o: { id: string }) => o.id);
      expect(listed).toHaveLength(7);
      expect(listed).toEqual(expect.arrayContaining(created));
      const payments = (await http.get('/payments').set('X-Tenant-ID', tenantId)).body;
      expect(payments).toHaveLength(7);
    });

    it('concurrent orders all land', async () => {
      const tenantId = newTenant();
      const results = await Promise.all(Array.from({ length: 8 }, () => post(tenantId, orderBody())));
      expect(results.map((r) => r.status)).toEqual(Array(8).fill(201));
      const list = await http.get('/orders').set('X-Tenant-ID', tenantId);
      expect(list.body).toHaveLength(8);
      expect(new Set(list.body.map((o: { paymentId: string }) => o.paymentId)).size).toBe(8);
    });
  });

  describe('errors everywhere are problem details', () => {
    it.each([
      ['get', '/nope'],
      ['delete', '/orders'],
      ['post', '/payments'],
    ])('%s %s (no such route) answers 404 not-found, with or without a tenant', async (method, path) => {
      const bare = await (http as unknown as Record<string, (p: string) => request.Test>)[method](path);
      expectProblem(bare, 404, 'not-found');
      const withTenant = await (http as unknown as Record<string, (p: string) => request.Test>)
        [method](path)
        .set('X-Tenant-ID', newTenant());
      expectProblem(withTenant, 404, 'not-found');
    });

    it('answers CORS preflights without a tenant', async () => {
      const res = await http
        .options('/orders')
        .set('Origin', 'https://shop.example')
        .set('Access-Control-Request-Method', 'POST')
        .set('Access-Control-Request-Headers', 'content-type,x-tenant-id,idempotency-key');
      expect(res.status).toBe(204);
      expect(res.headers['access-control-allow-origin']).toBe('*');
      expect(res.headers['access-control-allow-headers']).toContain('x-tenant-id');
      expect(res.headers['access-control-allow-headers']).toContain('idempotency-key');
    });

    // Last in the suite: it breaks the database on purpose.
    it('a failure inside answers 500 internal-error, leaks nothing and logs the cause', async () => {
      await app.get(DataSource).query('DROP TABLE payments');
      const errorsBefore = logger.at('error').length;
      const res = await http.get('/payments').set('X-Tenant-ID', newTenant());
      expectProblem(res, 500, 'internal-error');
      expect(res.body).toEqual({
        type: PROBLEM_BASE + 'internal-error',
        title: 'Internal server error',
        status: 500,
        detail: 'An unexpected error occurred. It has been logged.',
        code: 'internal_error',
      });
      const logged = logger.at('error').slice(errorsBefore).join('\n');
      expect(logged).toContain('GET /payments failed');
      expect(logged).toMatch(/QueryFailedError/);
    });
  });
});
