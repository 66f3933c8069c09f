import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { INestApplication } from '@nestjs/common';
import { IDEMPOTENCY_SPANS } from 'nestjs-idempotency/telemetry';
import request from 'supertest';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { startTracing, traceEveryRequest, type TestTracing } from '../support/tracing.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

describe.each(backends)('spans of POST /orders (durable, transactional) on %s', (_name, setUp) => {
  let backend: Backend | undefined;
  let app: INestApplication;
  let http: ReturnType<typeof request>;
  let tracing: TestTracing;

  beforeAll(async () => {
    tracing = startTracing();
    backend = await setUp();
    app = await createOrdersApp({ env: backend.env, logger: false });
    traceEveryRequest(app.getHttpServer() as Server);
    await app.listen(0, '127.0.0.1');
    http = request(await app.getUrl());
  });

  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
    await tracing?.stop();
  });

  it('traces the claim with the durable confirmation, the commit around the handler, then the replay', async () => {
    const tenant = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const post = () =>
      http
        .post('/orders')
        .set('X-Tenant-ID', tenant)
        .set('Idempotency-Key', key)
        .set('Content-Type', 'application/json')
        .send(body);
    expect((await post()).status).toBe(201);
    expect((await post()).headers['idempotent-replayed']).toBe('true');

    const finished = tracing.spans.getFinishedSpans();
    const [fresh, replay] = finished.filter((span) => span.name === 'HTTP POST /orders');
    const only = (name: string, parent: typeof fresh) => {
      const found = finished.filter((span) => span.name === name && tracing.parentOf(span) === parent);
      expect(found).toHaveLength(1);
      return found[0];
    };

    // fresh: claim (fast claim, then the durable row), the transaction (handler and durable
    // completion inside it, so they commit together), then the fast tier follows. On the embedded
    // defaults the order.created consumer may run in-process, inside this request's context: its
    // `idempotency.run` span (and all of its phases) may then hang under this request too.
    const ownChildren = tracing.childrenOf(fresh).filter((name) => name !== IDEMPOTENCY_SPANS.run);
    expect(ownChildren).toEqual([
      IDEMPOTENCY_SPANS.claim,
      'idempotency.durable.transaction',
      'idempotency.fast.complete',
    ]);
    const claim = only(IDEMPOTENCY_SPANS.claim, fresh);
    expect(tracing.childrenOf(claim)).toEqual(['idempotency.durable.claim', 'idempotency.fast.claim']);
    expect(claim.attributes).toMatchObject({
      'idempotency.operation': 'orders.create',
      'idempotency.tenant': tenant,
      'idempotency.outcome': 'claimed',
    });
    const commit = only('idempotency.durable.transaction', fresh);
    expect(tracing.childrenOf(commit)).toEqual(['idempotency.durable.complete', IDEMPOTENCY_SPANS.handler]);
    expect(only(IDEMPOTENCY_SPANS.handler, commit).attributes).toMatchObject({ 'idempotency.outcome': 'ok' });

    // replay: answered by the fast tier alone
    expect(tracing.childrenOf(replay)).toEqual([IDEMPOTENCY_SPANS.claim, IDEMPOTENCY_SPANS.replay]);
    expect(tracing.childrenOf(only(IDEMPOTENCY_SPANS.claim, replay))).toEqual(['idempotency.fast.claim']);
    expect(only(IDEMPOTENCY_SPANS.replay, replay).attributes).toMatchObject({ 'idempotency.status_code': 201 });

    // one trace per request, and the key's hash is the same in both
    expect(claim.spanContext().traceId).toBe(fresh.spanContext().traceId);
    expect(only(IDEMPOTENCY_SPANS.claim, replay).attributes['idempotency.key_hash']).toBe(
      claim.attributes['idempotency.key_hash'],
    );
    expect(JSON.stringify(finished.map((span) => span.attributes))).not.toContain(key);
  });

  it('groups the phases of a run() (the order.created consumer) under one idempotency.run span', async () => {
    const runs = () =>
      tracing.spans
        .getFinishedSpans()
        .filter(
          (span) =>
            span.name === IDEMPOTENCY_SPANS.run &&
            span.attributes['idempotency.operation'] === 'notifications.order-created',
        );
    const before = runs().length;
    const res = await http
      .post('/orders')
      .set('X-Tenant-ID', newTenant())
      .set('Idempotency-Key', randomUUID())
      .set('Content-Type', 'application/json')
      .send(orderBody());
    expect(res.status).toBe(201);
    const deadline = Date.now() + 15_000;
    while (runs().length === before && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    const run = runs()[before];
    // A root span in the BullMQ worker; under the request when the consumer runs in-process.
    expect(tracing.childrenOf(run)).toEqual([
      IDEMPOTENCY_SPANS.claim,
      'idempotency.durable.transaction',
      'idempotency.fast.complete',
    ]);
    const inRun = (name: string) =>
      tracing.spans.getFinishedSpans().find((span) => span.name === name && tracing.parentOf(span) === run)!;
    expect(tracing.childrenOf(inRun(IDEMPOTENCY_SPANS.claim))).toEqual([
      'idempotency.durable.claim',
      'idempotency.fast.claim',
    ]);
    expect(tracing.childrenOf(inRun('idempotency.durable.transaction'))).toEqual([
      'idempotency.durable.complete',
      IDEMPOTENCY_SPANS.handler,
    ]);
    expect(run.attributes).toMatchObject({ 'idempotency.outcome': 'fresh' });
  });
});
