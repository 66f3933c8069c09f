import {
  createNoopMeter,
  type Counter,
  type Histogram,
  type MeterProvider,
  type ObservableGauge,
} from '@opentelemetry/api';
import {
  DURATION_BUCKETS_SECONDS,
  IDEMPOTENCY_INSTRUMENTATION_SCOPE,
  IDEMPOTENCY_METRICS,
  INSTRUMENTATION_VERSION,
  RECORD_SIZE_BUCKETS_BYTES,
} from './idempotency-telemetry.constants.js';

/** The library's instruments on one meter provider (names and attributes: `IDEMPOTENCY_METRICS`). */
export interface Instruments {
  claims: Counter;
  replays: Counter;
  conflicts: Counter;
  takeovers: Counter;
  lostLeases: Counter;
  finishGivenUp: Counter;
  releases: Counter;
  failOpen: Counter;
  storeErrors: Counter;
  storeDuration: Histogram;
  handlerDuration: Histogram;
  recordSize: Histogram;
  activeClaims: ObservableGauge;
  oldestClaimAge: ObservableGauge;
}

/** Creates the instruments on `provider`'s meter for the library's instrumentation scope. */
/** The API's own no-op provider (none registered): its meters are all the one no-op meter. */
export function isNoopMeterProvider(provider: MeterProvider): boolean {
  return provider.getMeter(IDEMPOTENCY_INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION) === createNoopMeter();
}

export function createInstruments(provider: MeterProvider): Instruments {
  const meter = provider.getMeter(IDEMPOTENCY_INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION);
  const counter = (name: string, description: string, unit: string) => meter.createCounter(name, { description, unit });
  const names = IDEMPOTENCY_METRICS;
  return {
    claims: counter(names.claims, 'Claims that let the handler run (fresh or after a takeover)', '{claim}'),
    replays: counter(names.replays, 'Requests answered from a stored record', '{request}'),
    conflicts: counter(
      names.conflicts,
      'Requests refused: key reused with another payload, or original still in progress',
      '{request}',
    ),
    takeovers: counter(names.takeovers, 'Dead leases recovered (taken over, or stored as outcome unknown)', '{lease}'),
    lostLeases: counter(names.lostLeases, 'Claims fenced out by a newer claim; their result is not stored', '{lease}'),
    finishGivenUp: counter(
      names.finishGivenUp,
      'Completions or releases given up after retries, when the lease could no longer be held',
      '{claim}',
    ),
    releases: counter(names.releases, 'Claims ended by freeing the key (the outcome is not stored)', '{claim}'),
    failOpen: counter(
      names.failOpen,
      'Requests run without idempotency because the store failed (fail-open)',
      '{request}',
    ),
    storeErrors: counter(names.storeErrors, 'Store calls that failed', '{error}'),
    storeDuration: meter.createHistogram(names.storeDuration, {
      description: 'Store call latency',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS_SECONDS },
    }),
    handlerDuration: meter.createHistogram(names.handlerDuration, {
      description: 'Handler run time under a claim',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS_SECONDS },
    }),
    recordSize: meter.createHistogram(names.recordSize, {
      description: 'Body size of stored records',
      unit: 'By',
      advice: { explicitBucketBoundaries: RECORD_SIZE_BUCKETS_BYTES },
    }),
    activeClaims: meter.createObservableGauge(names.activeClaims, {
      description: 'Claims this process holds right now',
      unit: '{claim}',
    }),
    oldestClaimAge: meter.createObservableGauge(names.oldestClaimAge, {
      description: 'Age of the oldest claim this process holds (0 with none)',
      unit: 's',
    }),
  };
}
