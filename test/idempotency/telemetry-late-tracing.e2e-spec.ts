import { jest } from '@jest/globals';
import { ProxyTracerProvider } from '@opentelemetry/api';
import type { Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore } from 'nestjs-idempotency';
import { IDEMPOTENCY_SPANS } from 'nestjs-idempotency/telemetry';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { send } from '../support/http/send.js';
import { startTracing, traceEveryRequest, type TestTracing } from '../support/tracing.js';

const headers = { 'X-Tenant-ID': 'tenant-late-otel', 'X-User-ID': 'u1' };

/**
 * Spans cost nothing until an OpenTelemetry SDK is registered: the phases then skip span and
 * context bookkeeping altogether. An SDK registered after startup is used from its first request
 * on, and one that is removed stops being asked.
 */
describe('Tracing registered after startup, and removed again', () => {
  let fixture: ContractApp;
  let tracing: TestTracing | undefined;
  const post = () =>
    send(fixture.url, '/charges', {
      method: 'POST',
      headers: { ...headers, 'Idempotency-Key': randomUUID() },
      body: { amount: 1 },
    });

  beforeAll(async () => {
    fixture = await startContractApp('express', new MemoryIdempotencyStore());
    traceEveryRequest(fixture.app.getHttpServer() as Server);
  });

  afterAll(async () => {
    await tracing?.stop();
    await fixture?.app.close();
  });

  it('asks no tracer for spans while no SDK is registered', async () => {
    const getTracer = jest.spyOn(ProxyTracerProvider.prototype, 'getTracer');
    try {
      // Warm-up: the request span of `traceEveryRequest` comes from a tracer taken at startup.
      const response = await post();
      expect(response.status).toBe(201);
      expect(getTracer).not.toHaveBeenCalled();
    } finally {
      getTracer.mockRestore();
    }
  });

  it('traces every phase once an SDK is registered late, and stops when it is removed', async () => {
    tracing = startTracing();
    const traced = await post();
    expect(traced.status).toBe(201);
    const names = () => tracing!.spans.getFinishedSpans().map((span) => span.name);
    const deadline = Date.now() + 5_000;
    while (!names().includes(IDEMPOTENCY_SPANS.complete) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    expect(names()).toEqual(
      expect.arrayContaining([IDEMPOTENCY_SPANS.claim, IDEMPOTENCY_SPANS.handler, IDEMPOTENCY_SPANS.complete]),
    );

    const exporter = tracing.spans;
    await tracing.stop();
    tracing = undefined;
    exporter.reset();
    expect((await post()).status).toBe(201);
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});
