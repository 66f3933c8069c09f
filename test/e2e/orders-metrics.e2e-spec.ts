import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, name, value] of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[name] = value;
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

describe.each(backends)('GET /metrics on %s', (_name, setUp) => {
  let backend: Backend | undefined;
  let app: INestApplication;
  let http: ReturnType<typeof request>;

  beforeAll(async () => {
    backend = await setUp();
    app = await createOrdersApp({ env: backend.env, logger: false });
    await app.listen(0, '127.0.0.1');
    http = request(await app.getUrl());
  });

  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  const scrape = async () => {
    const res = await http.get('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    return { text: res.text, samples: parseExposition(res.text) };
  };
  const value = (samples: Sample[], name: string, labels: Record<string, string>) =>
    samples
      .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
      .reduce((sum, s) => sum + s.value, 0);

  it('shows the idempotency series after traffic, without a tenant and without raw keys', async () => {
    const tenant = newTenant();
    const key = `metrics-${randomUUID()}`;
    const post = (body: object) =>
      http
        .post('/orders')
        .set('X-Tenant-ID', tenant)
        .set('Idempotency-Key', key)
        .set('Content-Type', 'application/json')
        .send(body);
    const before = (await scrape()).samples;
    const body = orderBody();
    expect((await post(body)).status).toBe(201);
    expect((await post(body)).headers['idempotent-replayed']).toBe('true');
    expect((await post(orderBody({ customerId: randomUUID() }))).status).toBe(422);

    const { text, samples } = await scrape();
    // The route names its operation (`@Idempotent({ operation: 'orders.create' })`).
    const operation = 'orders.create';
    const delta = (name: string, labels: Record<string, string>) =>
      value(samples, name, labels) - value(before, name, labels);
    expect(delta('idempotency_claims_total', { operation, tier: 'durable', outcome: 'fresh' })).toBe(1);
    expect(delta('idempotency_replays_total', { operation, outcome: 'replayed' })).toBe(1);
    expect(delta('idempotency_conflicts_total', { operation, kind: 'mismatch' })).toBe(1);
    expect(delta('idempotency_handler_duration_count', { operation, outcome: 'ok' })).toBe(1);
    expect(delta('idempotency_record_size_count', { operation, tier: 'durable', outcome: 'stored' })).toBe(1);
    expect(value(samples, 'idempotency_store_duration_count', { tier: 'durable', phase: 'transaction' })).toBe(0);
    expect(
      value(samples, 'idempotency_store_duration_count', { tier: 'fast', phase: 'claim', outcome: 'ok' }),
    ).toBeGreaterThanOrEqual(3);
    expect(
      value(samples, 'idempotency_store_duration_count', { tier: 'durable', phase: 'claim', outcome: 'ok' }),
    ).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^# HELP idempotency_claims_total Claims that let the handler run/m);
    expect(text).toMatch(/^# TYPE idempotency_store_duration histogram$/m);
    expect(text).not.toContain(key);
    expect(text).not.toContain(tenant);
  });
});
