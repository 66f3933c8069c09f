/** Request header that carries the client's key (docs/contract.md B.2). @publicApi */
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
/** Default name of the header that marks a replayed response (Stripe's name, docs/contract.md B.6). @publicApi */
export const IDEMPOTENT_REPLAYED_HEADER = 'Idempotent-Replayed';
/** Default base of the problem type URIs (docs/contract.md B.11). Configure your own documentation page. */
export const DEFAULT_PROBLEM_TYPE_BASE_URI = 'https://api.example.com/problems/';
/** Media type of every error the library answers (RFC 9457). */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** 24 h: Stripe's floor (docs/contract.md B.10). */
export const DEFAULT_TTL_MS = 86_400_000;
/** 30 s lease renewed every 10 s while a handler runs (docs/contract.md B.9 rule 25). */
export const DEFAULT_LEASE_MS = 30_000;
/** The heartbeat renews the lease this many times per lease, unless `heartbeatMs` is set: 30 s → 10 s. */
export const HEARTBEATS_PER_LEASE = 3;
/** 1 MiB (docs/contract.md B.8 rule 23). */
export const DEFAULT_MAX_STORED_RESPONSE_BYTES = 1_048_576;
/** 1 MiB: largest request body fingerprinted by default; above it a 413 problem. */
export const DEFAULT_MAX_FINGERPRINTED_BODY_BYTES = 1_048_576;

/** Metadata key of `@Idempotent()` route options. */
export const IDEMPOTENT_ROUTE_METADATA = 'idempotency:route';
/** Metadata key of `@IdempotencyOutcome()`. */
export const IDEMPOTENCY_OUTCOME_METADATA = 'idempotency:outcome';
/** Metadata key of `@SkipIdempotency()`. */
export const SKIP_IDEMPOTENCY_METADATA = 'idempotency:skip';

/**
 * Headers a browser client needs: pass them to `app.enableCors()` so `Idempotency-Key` may be
 * sent and the replay marker, key echo, `Retry-After` and `Location` may be read (docs/contract.md B.6).
 *
 * @example
 * app.enableCors({ allowedHeaders: ['Content-Type', ...IDEMPOTENCY_CORS.allowedHeaders],
 *                  exposedHeaders: IDEMPOTENCY_CORS.exposedHeaders });
 * @publicApi
 */
export const IDEMPOTENCY_CORS = Object.freeze({
  allowedHeaders: Object.freeze([IDEMPOTENCY_KEY_HEADER]) as readonly string[],
  exposedHeaders: Object.freeze([
    IDEMPOTENT_REPLAYED_HEADER,
    IDEMPOTENCY_KEY_HEADER,
    'Retry-After',
    'Location',
    'Content-Location',
  ]) as readonly string[],
});
