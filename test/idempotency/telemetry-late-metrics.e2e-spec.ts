import { metrics } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { randomUUID } from 'node:crypto';
import { MemoryIdempotencyStore } from 'nestjs-idempotency';
import { IDEMPOTENCY_METRICS as M } from 'nestjs-idempotency/telemetry';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { send } from '../support/http/send.js';

class OnDemandMetricReader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

const headers = { 'X-Tenant-ID': 'tenant-late-metrics', 'X-User-ID': 'u1' };

/**
 * Without an SDK the phases skip their timing wrappers (issue 31): a meter provider registered
 * after the module started, with no tracing at all, must still get every phase's metrics from
 * its first request on.
 */
describe('Metrics registered after startup, without tracing', () => {
  let fixture: ContractApp;
  const reader = new OnDemandMetricReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const post = () =>
    send(fixture.url, '/charges', {
      method: 'POST',
      headers: { ...headers, 'Idempotency-Key': randomUUID() },
      body: { amount: 1 },
    });

  beforeAll(async () => {
    fixture = await startContractApp('express', new MemoryIdempotencyStore());
  });
  afterAll(async () => {
    await fixture?.app.close();
    await meterProvider.shutdown();
    metrics.disable();
  });

  it('records store, handler and record metrics once a MeterProvider is registered late', async () => {
    expect((await post()).status).toBe(201); // served with the API's no-op meter
    expect(metrics.setGlobalMeterProvider(meterProvider)).toBe(true);
    expect((await post()).status).toBe(201);
    const { resourceMetrics } = await reader.collect();
    const names = new Set(
      resourceMetrics.scopeMetrics
        .flatMap((scope) => scope.metrics.filter((m) => m.dataPoints.length > 0))
        .map((m) => m.descriptor.name),
    );
    expect([M.claims, M.storeDuration, M.handlerDuration, M.recordSize].filter((name) => !names.has(name))).toEqual([]);
  });
});
