/**
 * The engine's vocabulary: what its adapter protocol (`begin` / `execute` / `finish` /
 * `abandon`) and `run()` take and return. Types only, so the engine, its adapters and the
 * telemetry can all import them without importing each other.
 */
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { IdempotencyClaim } from './idempotency-claim.js';
import type { OutcomeOverride } from './outcome-policy.js';
import type { ScopedKey } from './scoped-key.js';

/**
 * Who a key belongs to and what it protects, for metrics, spans and logs only (never part of the
 * record's identity). The operation is a route template or a consumer name, so it is safe as a
 * metric attribute; the tenant goes into spans and logs, never into metric attributes.
 */
export interface TelemetryLabels {
  operation: string;
  tenant?: string;
}

/** What `begin` needs: who the key belongs to, what was asked, and the route's policy. */
export interface BeginRequest {
  scoped: ScopedKey;
  fingerprint: string;
  policy: ResolvedPolicy;
  /** Operation and tenant, for metrics, spans and logs only; never part of the identity. */
  labels?: TelemetryLabels;
}

/**
 * The engine's verdict on a request (DESIGN "The flow of one request"):
 * - `claimed`: run the handler (`execute`), or `finish` / `abandon` the claim yourself;
 * - `replay`: answer the stored response;
 * - `mismatch`: the key was used with another payload;
 * - `in-progress`: the original still runs under a live lease;
 * - `replay-unavailable`: completed, but the body was not stored;
 * - `outcome-unknown`: a dead lease under `staleLock: 'fail'`; the 500 is now the stored result.
 */
export type BeginResult =
  | { kind: 'claimed'; claim: IdempotencyClaim }
  | { kind: 'replay'; response: StoredResponse }
  | { kind: 'mismatch' }
  | { kind: 'in-progress'; retryAfterSeconds: number }
  | { kind: 'replay-unavailable'; response: StoredResponse }
  | { kind: 'outcome-unknown'; response: StoredResponse };

/**
 * A call of `IdempotencyService.run()`: any code path (a message consumer, a webhook, a job)
 * that must take effect once per key.
 *
 * @publicApi
 */
export interface RunRequest {
  /** The operation, e.g. the consumer's name (`'billing.order-created'`): part of the scope. */
  operation: string;
  /** The key: an event id, a job id, a message id (never a broker offset). */
  key: string;
  /** Tenant the key belongs to, when keys are per tenant. */
  tenant?: string;
  /** Principal the key belongs to, when keys are per principal. */
  principal?: string;
  /** What a retry must repeat exactly (e.g. the message body); default: only the key counts. */
  fingerprint?: string | Buffer;
  /** Policy of this call (leases, TTL, `durable`, `transactional`, `inProgress`), over the module's. */
  options?: IdempotentOptions;
}

/**
 * What `run()` returns: the function's value, `fresh` when it ran now, `replayed` when an
 * earlier run's stored value is returned instead (as JSON: a `Date` comes back as a string).
 *
 * @publicApi
 */
export type RunResult<T> = { status: 'fresh'; value: T } | { status: 'replayed'; value: T };

/** How a claim ended: `stored` (replayable), `released` (key free again) or `lost` (fenced out). */
export type FinishResult = 'stored' | 'released' | 'lost';

/** How the handler ended, as the adapter saw it. */
export type HandlerOutcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/**
 * What `execute` needs from an adapter: how to run the handler (with the transaction's ORM handle
 * on transactional routes), how to wait for the response it produced (undefined: none will come,
 * e.g. the client went away), and which outcome was forced. The response may be complete before
 * the handler settles (a handler that writes the response itself and then waits for it), so
 * `response` gets the handler's outcome as a promise, and `override` gets it only if it settled.
 */
export interface Execution {
  run(manager: unknown): Promise<HandlerOutcome>;
  response(outcome: Promise<HandlerOutcome>): Promise<StoredResponse | undefined>;
  override(outcome: HandlerOutcome | undefined): OutcomeOverride | undefined;
}

/**
 * The result of `execute`: `sent` (the response stands), `replaced` (it must not be sent: the
 * transaction did not commit, send `response` instead), or `not-run` (the claim was lost before
 * the handler started; `response` is the answer).
 */
export type ExecutionResult =
  | { kind: 'sent' }
  | { kind: 'replaced'; reason: 'lost' | 'store-unavailable'; retryAfterSeconds: number }
  | { kind: 'not-run'; reason: 'lost' | 'store-unavailable'; retryAfterSeconds: number };
