import { readFileSync } from 'node:fs';
import { metrics } from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { IdempotencyStore, type ClaimRequest, type ClaimResult } from '../stores/idempotency-store.js';
import { MemoryIdempotencyStore } from '../stores/memory-idempotency.store.js';
import { IdempotencyTelemetry } from './idempotency-telemetry.js';
import { isNoopMeterProvider } from './idempotency-instruments.js';
import { IDEMPOTENCY_INSTRUMENTATION_SCOPE, IDEMPOTENCY_METRICS } from './idempotency-telemetry.constants.js';

class OnDemandMetricReader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

/** A memory store whose network is down for claims. */
class UnreachableClaimStore extends MemoryIdempotencyStore {
  override async claim(_key: string, _request: ClaimRequest): Promise<ClaimResult> {
    throw new IdempotencyStoreError('connection refused');
  }
}

/** `name` points as `attributes -> value` (counter sums, histogram counts). */
async function read(reader: MetricReader, name: string): Promise<Record<string, number>> {
  const { resourceMetrics } = await reader.collect();
  const out: Record<string, number> = {};
  for (const metric of resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics)) {
    if (metric.descriptor.name !== name) continue;
    for (const point of metric.dataPoints) {
      out[JSON.stringify(point.attributes)] =
        typeof point.value === 'number' ? point.value : (point.value as { count: number }).count;
    }
  }
  return out;
}

function register(): { reader: MetricReader; provider: MeterProvider } {
  const reader = new OnDemandMetricReader();
  const provider = new MeterProvider({ readers: [reader] });
  expect(metrics.setGlobalMeterProvider(provider)).toBe(true);
  return { reader, provider };
}

describe('IdempotencyTelemetry', () => {
  const stores: MemoryIdempotencyStore[] = [];
  const memoryStore = <S extends MemoryIdempotencyStore>(store: S): S => (stores.push(store), store);
  afterEach(() => {
    metrics.disable();
    stores.splice(0).forEach((store) => store.onApplicationShutdown());
  });

  it('records into the SDK registered after it was created, and follows a replaced provider', async () => {
    const telemetry = new IdempotencyTelemetry();
    const store = telemetry.instrumentStore(memoryStore(new MemoryIdempotencyStore()), 'fast');
    await store.get('before-any-sdk'); // a no-op: nothing is registered yet

    const first = register();
    await store.get('a');
    await store.get('b');
    expect(await read(first.reader, IDEMPOTENCY_METRICS.storeDuration)).toEqual({
      [JSON.stringify({ tier: 'fast', phase: 'get', outcome: 'ok' })]: 2,
    });

    metrics.disable();
    const second = register();
    await store.get('c');
    expect(Object.values(await read(second.reader, IDEMPOTENCY_METRICS.storeDuration))).toEqual([1]);
    expect(Object.values(await read(first.reader, IDEMPOTENCY_METRICS.storeDuration))).toEqual([2]);
  });

  it("reports its instrumentation scope as the package's own name and version", async () => {
    const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      name: string;
      version: string;
    };
    const telemetry = new IdempotencyTelemetry();
    const store = telemetry.instrumentStore(memoryStore(new MemoryIdempotencyStore()), 'fast');
    const { reader } = register();
    await store.get('a');
    const { resourceMetrics } = await reader.collect();
    const scopes = resourceMetrics.scopeMetrics.map(({ scope }) => ({ name: scope.name, version: scope.version }));
    expect(scopes).toEqual([{ name: 'nestjs-idempotency', version: manifest.version }]);
    expect(IDEMPOTENCY_INSTRUMENTATION_SCOPE).toBe(manifest.name);
  });

  it('wraps a store without changing it: instanceof, private state and unobserved members still work', async () => {
    const inner = memoryStore(new MemoryIdempotencyStore());
    const store = new IdempotencyTelemetry().instrumentStore(inner, 'fast');
    expect(store).toBeInstanceOf(IdempotencyStore);
    expect(store).toBeInstanceOf(MemoryIdempotencyStore);
    const request = { ownerToken: 'o1', fingerprint: 'f', leaseMs: 1_000, ttlMs: 10_000 };
    expect((await store.claim('k', request)).kind).toBe('claimed');
    expect((await inner.get('k'))?.ownerToken).toBe('o1');
    await expect(store.waitForChange('k', 1)).resolves.toBeUndefined();
  });

  it('counts store failures by tier and phase, and rethrows them unchanged', async () => {
    const { reader } = register();
    const store = new IdempotencyTelemetry().instrumentStore(memoryStore(new UnreachableClaimStore()), 'durable');
    const request = { ownerToken: 'o1', fingerprint: 'f', leaseMs: 1_000, ttlMs: 10_000 };
    await expect(store.claim('k', request)).rejects.toThrow(IdempotencyStoreError);
    await expect(store.claim('k', request)).rejects.toThrow('connection refused');
    expect(await read(reader, IDEMPOTENCY_METRICS.storeErrors)).toEqual({
      [JSON.stringify({ tier: 'durable', phase: 'claim' })]: 2,
    });
  });

  it("does not count a transaction's failing work as a store error, but does count the transaction's own failure", async () => {
    const { reader } = register();
    let commitFails = false;
    const durable = {
      async transaction<T>(_key: string, _owner: string, work: (tx: { manager: unknown }) => Promise<T>): Promise<T> {
        const value = await work({ manager: undefined });
        if (commitFails) throw new IdempotencyStoreError('commit failed', 'durable');
        return value;
      },
    };
    const store = new IdempotencyTelemetry().instrumentStore(durable, 'durable');
    const rollback = Symbol('rollback');
    await expect(store.transaction('k', 'o', () => Promise.reject(rollback))).rejects.toBe(rollback);
    await expect(store.transaction('k', 'o', async () => 'ok')).resolves.toBe('ok');
    commitFails = true;
    await expect(store.transaction('k', 'o', async () => 'ok')).rejects.toThrow('commit failed');
    expect(await read(reader, IDEMPOTENCY_METRICS.storeErrors)).toEqual({
      [JSON.stringify({ tier: 'durable', phase: 'transaction' })]: 1,
    });
    // A transaction lasts as long as its handler: its latency is not a store latency.
    expect(await read(reader, IDEMPOTENCY_METRICS.storeDuration)).toEqual({});
  });
});

describe('isNoopMeterProvider (store calls skip timing while no SDK is registered)', () => {
  it("is true for the API's provider with no SDK, false for an SDK's", () => {
    expect(isNoopMeterProvider(metrics.getMeterProvider())).toBe(true);
    expect(isNoopMeterProvider(new MeterProvider({ readers: [new OnDemandMetricReader()] }))).toBe(false);
  });
});
