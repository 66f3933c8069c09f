/**
 * Names of the library's OpenTelemetry instruments and spans. They are part of the public
 * contract (dashboards and alerts depend on them): docs/operations.md lists them, and a rename is a
 * breaking change. The Prometheus exporter turns `idempotency.claims` into
 * `idempotency_claims_total` and `idempotency.store.duration` (seconds) into
 * `idempotency_store_duration_bucket` / `_sum` / `_count` (the unit is in `# UNIT`, not the name).
 */

/**
 * The package's name and version. Literals rather than a read of package.json: the same source
 * runs as CommonJS (dist/cjs) and as an ES module (the repository's tests), and neither `require`
 * nor `import.meta` exists in both. idempotency-telemetry.spec.ts keeps them equal to package.json.
 */
const manifest = { name: 'nestjs-idempotency', version: '0.1.0' } as const;

/** Instrumentation scope of the meter and the tracer: the package name, `nestjs-idempotency`. @publicApi */
export const IDEMPOTENCY_INSTRUMENTATION_SCOPE: string = manifest.name;

/** Version reported with the instrumentation scope: the package version. */
export const INSTRUMENTATION_VERSION: string = manifest.version;

/** @publicApi */
export const IDEMPOTENCY_METRICS = {
  /** Counter: claims that let the handler run. Attributes: `operation`, `outcome` (`fresh` | `takeover`), `tier`. */
  claims: 'idempotency.claims',
  /** Counter: requests answered from a stored record. Attributes: `operation`, `outcome` (`replayed` | `unavailable`). */
  replays: 'idempotency.replays',
  /** Counter: requests refused by the key's record. Attributes: `operation`, `kind` (`mismatch` | `in_progress`). */
  conflicts: 'idempotency.conflicts',
  /** Counter: dead leases recovered. Attributes: `operation`, `tier`, `outcome` (`taken_over` | `outcome_unknown`). */
  takeovers: 'idempotency.takeovers',
  /** Counter: claims fenced out (once per claim). Attributes: `operation`, `phase` (`heartbeat` | `complete` | `release` | `transaction`). */
  lostLeases: 'idempotency.leases.lost',
  /**
   * Counter: claims whose completion or release kept failing until their lease could no longer be
   * held; the lease lapses and recovery takes over. Attributes: `operation`, `action` (`complete` | `release`).
   */
  finishGivenUp: 'idempotency.finish.given_up',
  /** Counter: claims ended by freeing the key. Attributes: `operation`, `tier`. */
  releases: 'idempotency.releases',
  /** Counter: requests run unprotected because the store failed (`onStoreError: 'fail-open'`). Attributes: `operation`. */
  failOpen: 'idempotency.fail_open',
  /** Counter: store calls that failed. Attributes: `tier` (`fast` | `durable`), `phase` (the store call: `claim`, `take_over`, `complete`, ...). */
  storeErrors: 'idempotency.store.errors',
  /**
   * Counter: messages a consumer's settlement could not carry out as decided (the republish to the
   * retry or dead-letter queue was refused, the channel failed, the queue was unknown), so a safe
   * disposition was used instead. Attributes: `consumer`, `action` (what was decided: `ack` |
   * `retry` | `dead-letter`), `outcome` (`requeued`: nacked back to its queue on the live channel;
   * `channel_closed`: the channel is gone and the broker requeues it; `unsettled`: a custom
   * settlement rejected, and the message is left to the transport).
   */
  settlementFallbacks: 'idempotency.consumer.settlement_fallbacks',
  /** Histogram, seconds: store call latency. Attributes: `tier`, `phase`, `outcome` (`ok` | `error`). */
  storeDuration: 'idempotency.store.duration',
  /** Histogram, seconds: handler run time under a claim. Attributes: `operation`, `outcome` (`ok` | `error`). */
  handlerDuration: 'idempotency.handler.duration',
  /** Histogram, bytes: body size of stored records. Attributes: `operation`, `tier`, `outcome` (`stored` | `body_omitted`). */
  recordSize: 'idempotency.record.size',
  /** Gauge: claims this process holds right now (handlers running under a claim). No attributes. */
  activeClaims: 'idempotency.claims.active',
  /** Gauge, seconds: how long the oldest claim this process holds has been held (0 with none): a stuck handler. */
  oldestClaimAge: 'idempotency.claims.oldest_age',
} as const;

/**
 * Span names, one per phase. Store calls get their own spans (`idempotency.fast.claim`,
 * `idempotency.durable.claim` = the durable confirmation, `idempotency.durable.transaction` = the
 * transactional commit, ...), children of the phase that made them.
 *
 * @publicApi
 */
export const IDEMPOTENCY_SPANS = {
  /** A whole `IdempotencyService.run()` (consumers, jobs, webhooks): the parent of its phases. */
  run: 'idempotency.run',
  claim: 'idempotency.claim',
  handler: 'idempotency.handler',
  complete: 'idempotency.complete',
  release: 'idempotency.release',
  replay: 'idempotency.replay',
} as const;

/** Span attribute names (namespaced, unlike metric attributes, to sit beside HTTP and DB ones). @publicApi */
export const IDEMPOTENCY_SPAN_ATTRIBUTES = {
  keyHash: 'idempotency.key_hash',
  operation: 'idempotency.operation',
  tenant: 'idempotency.tenant',
  outcome: 'idempotency.outcome',
  tier: 'idempotency.tier',
  fencingToken: 'idempotency.fencing_token',
  statusCode: 'idempotency.status_code',
} as const;

/** Latency buckets in seconds: store calls take about a millisecond, handlers up to seconds. */
export const DURATION_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/** Size buckets in bytes, up to the default `maxStoredResponseBytes` (1 MiB). */
export const RECORD_SIZE_BUCKETS_BYTES = [0, 256, 1024, 4096, 16_384, 65_536, 262_144, 1_048_576];
