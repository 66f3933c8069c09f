import { createHash, hash } from 'node:crypto';

/**
 * A dimension a key can be made unique within (docs/contract.md B.3 rule 10).
 *
 * @publicApi
 */
export type ScopeDimension = 'tenant' | 'principal' | 'operation';

/**
 * Everything that may identify a record. Dimensions left out of the configured scope are
 * ignored here (with `scope: ['tenant']` the principal and operation go into the fingerprint
 * instead, docs/contract.md B.3 rule 12).
 */
export interface ScopeParts {
  /** `METHOD + route template` by default, or the handler's `operation` override. */
  operation: string;
  /** Resolved tenant; required when `tenant` is in scope. */
  tenant?: string;
  /** Resolved principal; required when `principal` is in scope. */
  principal?: string;
  /** The validated client key (or an event / message id for non-HTTP callers). */
  key: string;
  /**
   * Dimensions whose value is an anonymous bucket (from `anonymousScope`) rather than a resolved
   * tenant or principal. They are encoded under a name of their own, so a bucket can never name
   * the same record as a real tenant or principal of the same value.
   */
  anonymous?: readonly ('tenant' | 'principal')[];
}

/**
 * The identity of one record.
 */
export interface ScopedKey {
  /**
   * Storage id: the first 32 hex characters (128 bits) of SHA-256 over {@link scopeKey}. Safe to
   * use as a Redis key or a primary key and to log: it never contains the raw client key.
   */
  readonly id: string;
  /**
   * The versioned canonical encoding the id is hashed from. It contains the raw client key, so
   * it stays in memory: never store it, log it or put it in an error.
   */
  readonly scopeKey: string;
}

/**
 * The scope could not be resolved for a request, e.g. no tenant on a route whose scope includes
 * `tenant`. Falling back to a shared namespace would let one caller replay another's response,
 * so the request fails instead (docs/contract.md B.3 rule 13).
 *
 * @publicApi
 */
export class IdempotencyScopeError extends Error {
  constructor(
    message: string,
    /** The dimension that is missing or unknown. */
    readonly dimension: string,
  ) {
    super(message);
    this.name = this.constructor.name;
  }
}

/** Canonical order, so `['operation', 'tenant']` and `['tenant', 'operation']` build one identity. */
const DIMENSIONS: readonly ScopeDimension[] = ['tenant', 'principal', 'operation'];
const SCOPE_VERSION = 'v1';
const DERIVED_VERSION = 'v1-derived';
const ID_HEX_CHARS = 32;

/**
 * Builds the identity of the record a key names (docs/contract.md B.3). The canonical string is a JSON
 * array, `["v1", [dimension, value]..., ["key", key]]`, with the scoped dimensions in a fixed
 * order: JSON string escaping makes the encoding injective (no value can imitate a separator),
 * naming each dimension keeps a tenant `x` apart from a principal `x`, and the version lets a
 * future encoding coexist with stored records.
 *
 * @throws IdempotencyScopeError when a dimension in `scope` has no value (or an empty one), when
 *   `scope` names an unknown dimension, or when the key is empty.
 * @example
 * const scoped = buildScopedKey({ operation: 'POST /orders', tenant: 't1', principal: 'u1', key }, [
 *   'tenant', 'principal', 'operation',
 * ]);
 * await store.claim(scoped.id, claim);
 */
export function buildScopedKey(parts: ScopeParts, scope: readonly ScopeDimension[]): ScopedKey {
  for (const dimension of scope) {
    if (!DIMENSIONS.includes(dimension)) {
      throw new IdempotencyScopeError(
        `Unknown idempotency scope dimension "${String(dimension)}": use "tenant", "principal" or "operation".`,
        String(dimension),
      );
    }
  }
  if (typeof parts.key !== 'string' || parts.key.length === 0) {
    throw new IdempotencyScopeError('An idempotency key must be a non-empty string.', 'key');
  }
  const encoded: unknown[] = [SCOPE_VERSION];
  for (const dimension of DIMENSIONS) {
    if (!scope.includes(dimension)) continue;
    const value = parts[dimension];
    if (typeof value !== 'string' || value.length === 0) {
      throw new IdempotencyScopeError(
        `The idempotency scope "${dimension}" is not resolved for this request: configure a ${dimension} ` +
          `resolver (or anonymousScope), or remove "${dimension}" from scope.`,
        dimension,
      );
    }
    const anonymous = dimension !== 'operation' && parts.anonymous?.includes(dimension);
    encoded.push([anonymous ? `anonymous-${dimension}` : dimension, value]);
  }
  encoded.push(['key', parts.key]);
  const scopeKey = JSON.stringify(encoded);
  const id = hash('sha256', scopeKey, 'hex').slice(0, ID_HEX_CHARS);
  return { id, scopeKey };
}

/**
 * A deterministic idempotency key for a downstream call (a payment provider, another service),
 * so a handler that is re-executed after a 5xx or a takeover sends the provider the same key
 * and the side effect happens once (docs/contract.md B.7 rule 17, brandur's derived keys).
 *
 * The key is `idk_` + base64url SHA-256 of a versioned encoding of the scoped identity and
 * `name`: stable across retries and processes, different per `name` (one per downstream call),
 * and it reveals neither the client's key nor the storage id. 47 ASCII characters fit Stripe's
 * 255 and Adyen's 64-character limits.
 *
 * @example
 * await stripe.paymentIntents.create(params, { idempotencyKey: derivedKey(scoped, 'charge') });
 */
export function derivedKey(scoped: ScopedKey, name: string): string {
  const digest = createHash('sha256')
    .update(JSON.stringify([DERIVED_VERSION, scoped.scopeKey, name]), 'utf8')
    .digest('base64url');
  return `idk_${digest}`;
}
