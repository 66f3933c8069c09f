import { Logger } from '@nestjs/common';
import { metrics, type Attributes } from '@opentelemetry/api';
import { MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import type { Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { IDEMPOTENCY_METRICS as M, IDEMPOTENCY_SPANS } from 'nestjs-idempotency/telemetry';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { send, type SendOptions } from '../support/http/send.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { startTracing, traceEveryRequest, type TestTracing } from '../support/tracing.js';
import { sleep } from '../support/timing.js';

/** A reader the test collects from on demand (no export interval). */
class OnDemandMetricReader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

interface Point {
  name: string;
  attributes: Attributes;
  /** The sum of a counter, or the number of recordings of a histogram. */
  value: number;
}

function pointsOf(resourceMetrics: ResourceMetrics): Point[] {
  return resourceMetrics.scopeMetrics.flatMap((scope) =>
    scope.metrics.flatMap((metric) =>
      metric.dataPoints.map((point) => ({
        name: metric.descriptor.name,
        attributes: point.attributes,
        value: typeof point.value === 'number' ? point.value : (point.value as { count: number }).count,
      })),
    ),
  );
}

const headers = { 'X-Tenant-ID': 'tenant-otel', 'X-User-ID': 'u1' };

describe('OpenTelemetry metrics, spans and logs (Redis store, Express)', () => {
  // A recognisable raw key: it must never show up in a log line, a metric or a span.
  const marker = `RAWKEY${randomUUID().replace(/-/g, '')}`;
  const keyOf = (step: string) => `${marker}-${step}`;
  let tracing: TestTracing;
  const reader = new OnDemandMetricReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const logs = new RecordingLogger();
  let redis: ThrowawayRedis;
  let fixture: ContractApp;
  let redisStopped: Promise<void> | undefined;
  const stopRedis = () => (redisStopped ??= redis?.stop());

  let handlersSeen = 0;
  const call = (path: string, options: SendOptions = {}) => send(fixture.url, path, { ...options, headers });

  /** Resolves once one more `/short-lease` handler has started (it records its context first). */
  async function handlerStarted(): Promise<void> {
    handlersSeen += 1;
    const deadline = Date.now() + 10_000;
    while (fixture.probe.contexts.length < handlersSeen && Date.now() < deadline) await sleep(20);
    expect(fixture.probe.contexts.length).toBe(handlersSeen);
  }

  async function points(): Promise<Point[]> {
    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    return pointsOf(resourceMetrics);
  }

  /** Sum over the points of `name` whose attributes include `attributes`. */
  async function total(name: string, attributes: Attributes = {}): Promise<number> {
    return (await points())
      .filter((p) => p.name === name && Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))
      .reduce((sum, p) => sum + p.value, 0);
  }

  /** The engine settles a claim after the response; waits (bounded) for a count to be reached. */
  async function totalReaching(expected: number, name: string, attributes: Attributes = {}): Promise<number> {
    const deadline = Date.now() + 10_000;
    let seen = await total(name, attributes);
    while (seen < expected && Date.now() < deadline) {
      await sleep(50);
      seen = await total(name, attributes);
    }
    return seen;
  }

  beforeAll(async () => {
    tracing = startTracing();
    redis = await startRedisServer();
    // The app (and its meter lookups) exists before the SDK is registered, as in an app that
    // registers its MeterProvider late: the instruments must still reach it.
    fixture = await startContractApp('express', new RedisIdempotencyStore(redis.url, { prefix: 'idem-otel' }));
    expect(metrics.setGlobalMeterProvider(meterProvider)).toBe(true);
    traceEveryRequest(fixture.app.getHttpServer() as Server);
    Logger.overrideLogger(logs);
  });

  afterAll(async () => {
    await fixture?.app.close();
    await stopRedis();
    await meterProvider.shutdown();
    metrics.disable();
    await tracing?.stop();
    Logger.overrideLogger(false);
  });

  it('counts a scripted sequence exactly: fresh, replay, mismatch, in progress, takeover, release, store error', async () => {
    // fresh, then its replay, then the same key with another payload
    expect((await call('/charges', { key: keyOf('a'), body: { amount: 1 } })).status).toBe(201);
    expect((await call('/charges', { key: keyOf('a'), body: { amount: 1 } })).headers.get('idempotent-replayed')).toBe(
      'true',
    );
    expect((await call('/charges', { key: keyOf('a'), body: { amount: 2 } })).status).toBe(422);

    // in progress: a duplicate arrives while the original, heartbeat alive, waits at a gate
    const gate = `gate-${marker}`;
    const original = call('/short-lease', { key: keyOf('b'), body: { gate } });
    await handlerStarted();
    expect((await call('/short-lease', { key: keyOf('b'), body: { gate } })).status).toBe(409);
    fixture.probe.open(gate);
    expect((await original).status).toBe(201);

    // takeover: the original's process stops renewing its 300 ms lease; a retry takes over and
    // the original, fenced out, loses its lease when it tries to complete
    const zombieGate = `zombie-${marker}`;
    const zombie = call('/short-lease', { key: keyOf('c'), body: { gate: zombieGate } });
    await handlerStarted();
    fixture.heartbeats.freeze();
    await sleep(1_000);
    const winner = await call('/short-lease', { key: keyOf('c'), body: { gate: zombieGate } });
    expect(winner.json()).toMatchObject({ tookOver: true, fencing: 2 });
    handlersSeen += 1;
    fixture.probe.open(zombieGate);
    expect((await zombie).json()).toMatchObject({ fencing: 1 });
    fixture.heartbeats.thaw();

    // a 500 is not stored: the key is released
    expect((await call('/status/500', { key: keyOf('d') })).status).toBe(500);

    // the store goes away: fail-closed refuses, fail-open runs unprotected
    await stopRedis();
    expect((await call('/charges', { key: keyOf('e'), body: {} })).status).toBe(503);
    expect((await call('/fail-open', { key: keyOf('f') })).status).toBe(201);

    expect(await totalReaching(1, M.lostLeases)).toBe(1);
    expect(await total(M.claims, { outcome: 'fresh', tier: 'fast' })).toBe(4); // a, b, c (zombie), d
    expect(await total(M.claims, { outcome: 'takeover', tier: 'fast' })).toBe(1);
    expect(await total(M.replays, { outcome: 'replayed', operation: 'POST /charges' })).toBe(1);
    expect(await total(M.conflicts, { kind: 'mismatch' })).toBe(1);
    expect(await total(M.conflicts, { kind: 'in_progress' })).toBe(1);
    expect(await total(M.takeovers, { outcome: 'taken_over', tier: 'fast', operation: 'POST /short-lease' })).toBe(1);
    expect(await total(M.lostLeases, { phase: 'complete', operation: 'POST /short-lease' })).toBe(1);
    expect(await total(M.releases, { tier: 'fast', operation: 'POST /status/:status' })).toBe(1);
    expect(await total(M.storeErrors, { tier: 'fast', phase: 'claim' })).toBe(2);
    expect(await total(M.storeErrors)).toBe(2);
    expect(await total(M.failOpen, { operation: 'POST /fail-open' })).toBe(1);
    // histograms: one recording per stored record (a, b, c's winner) and per handler run
    expect(await total(M.recordSize, { outcome: 'stored' })).toBe(3);
    expect(await total(M.handlerDuration, { outcome: 'ok' })).toBe(4); // a, b, c twice
    expect(await total(M.handlerDuration, { outcome: 'error' })).toBe(1); // d
    expect(await total(M.storeDuration, { tier: 'fast', phase: 'claim', outcome: 'ok' })).toBeGreaterThanOrEqual(8);
    expect(await total(M.storeDuration, { tier: 'fast', phase: 'take_over', outcome: 'ok' })).toBe(1);

    // one structured line per noteworthy event, with the key's hash, tenant, operation and outcome
    const warnings = logs.at('warn');
    const errors = logs.at('error');
    const takeover = warnings.filter((line) => line.includes('event=takeover'));
    expect(takeover).toHaveLength(1);
    expect(takeover[0]).toMatch(
      /^takeover of a dead lease event=takeover keyHash=[0-9a-f]{32} tenant=tenant-otel operation="POST \/short-lease" outcome=taken_over tier=fast fencing=2/,
    );
    const lost = warnings.filter((line) => line.includes('event=lost_lease'));
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatch(
      /keyHash=[0-9a-f]{32} tenant=tenant-otel operation="POST \/short-lease" outcome=fenced_out phase=complete fencing=1/,
    );
    const storeErrors = errors.filter((line) => line.includes('event=store_error'));
    expect(storeErrors).toHaveLength(2);
    for (const line of storeErrors)
      expect(line).toMatch(
        /keyHash=[0-9a-f]{32} tenant=tenant-otel operation="POST \/(charges|fail-open)" outcome=claim_failed phase=claim tier=fast/,
      );
    const failOpen = warnings.filter((line) => line.includes('event=fail_open'));
    expect(failOpen).toHaveLength(1);
    expect(failOpen[0]).toMatch(
      /keyHash=[0-9a-f]{32} tenant=tenant-otel operation="POST \/fail-open" outcome=unprotected/,
    );
  });

  it('makes each phase a child of the request span; store calls nest in their phase', async () => {
    const finished = tracing.spans.getFinishedSpans();
    const { parentOf } = tracing;
    const named = (name: string) => finished.filter((span) => span.name === name);

    const claims = named(IDEMPOTENCY_SPANS.claim);
    expect(claims.length).toBeGreaterThanOrEqual(10);
    for (const phase of [
      IDEMPOTENCY_SPANS.claim,
      IDEMPOTENCY_SPANS.handler,
      IDEMPOTENCY_SPANS.complete,
      IDEMPOTENCY_SPANS.release,
      IDEMPOTENCY_SPANS.replay,
    ]) {
      const phaseSpans = named(phase);
      expect(phaseSpans.length).toBeGreaterThan(0);
      for (const span of phaseSpans) expect(parentOf(span)?.name).toMatch(/^HTTP POST \//);
    }
    expect(named(IDEMPOTENCY_SPANS.replay)).toHaveLength(1);
    expect(named(IDEMPOTENCY_SPANS.release)).toHaveLength(1);

    // One request, whole: claim, handler and complete under its span, the store calls in them.
    const [request] = finished.filter((span) => span.name === 'HTTP POST /status/500');
    const children = tracing.childrenOf(request);
    expect(children).toEqual([IDEMPOTENCY_SPANS.claim, IDEMPOTENCY_SPANS.handler, IDEMPOTENCY_SPANS.release].sort());
    const storeCalls = finished.filter(
      (span) => span.name.startsWith('idempotency.fast.') && parentOf(span) && parentOf(parentOf(span)!) === request,
    );
    expect(storeCalls.map((span) => `${parentOf(span)!.name} > ${span.name}`).sort()).toEqual([
      `${IDEMPOTENCY_SPANS.claim} > idempotency.fast.claim`,
      `${IDEMPOTENCY_SPANS.release} > idempotency.fast.release`,
    ]);
    const claim = finished.find((span) => span.name === IDEMPOTENCY_SPANS.claim && parentOf(span) === request);
    expect(claim?.attributes).toMatchObject({
      'idempotency.operation': 'POST /status/:status',
      'idempotency.tenant': 'tenant-otel',
      'idempotency.outcome': 'claimed',
    });

    // The store error shows on the claim span of the refused request.
    const failed = named(IDEMPOTENCY_SPANS.claim).filter((span) => span.status.code === 2);
    expect(failed).toHaveLength(2);
  });

  it('never lets the raw key into a log line, a metric attribute or a span', async () => {
    const logged = logs.entries.map((entry) => entry.text).join('\n');
    expect(logged).toContain('keyHash=');
    expect(logged).not.toContain(marker);
    const { resourceMetrics } = await reader.collect();
    expect(JSON.stringify(pointsOf(resourceMetrics))).not.toContain(marker);
    const traced = tracing.spans
      .getFinishedSpans()
      .map((span) =>
        JSON.stringify({ name: span.name, attributes: span.attributes, events: span.events, status: span.status }),
      );
    expect(traced.length).toBeGreaterThan(0);
    expect(traced.join('\n')).not.toContain(marker);
  });
});
