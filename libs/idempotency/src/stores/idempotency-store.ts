import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';

/**
 * What a caller asks for when it claims a key.
 *
 * @publicApi
 */
export interface ClaimRequest {
  /** Fresh random token of this claim (see `newOwnerToken()`). */
  ownerToken: string;
  /** Request fingerprint (base64url SHA-256). */
  fingerprint: string;
  /** Lease length in ms: the claim is considered dead once it lapses without an `extend`. */
  leaseMs: number;
  /** Record lifetime in ms from the claim (CONTRACT B.10). */
  ttlMs: number;
}

/**
 * Result of `claim` / `takeOver`. A discriminated union: `claimed` means the caller owns the
 * record now; `existing` hands back the record somebody else holds, with the store's clock.
 *
 * @publicApi
 */
export type ClaimResult =
  | { kind: 'claimed'; record: IdempotencyRecord }
  | { kind: 'existing'; record: IdempotencyRecord; nowMs: number };

/**
 * The fast-tier contract. Each method is one atomic operation (one Lua script in Redis); every
 * write is fenced by the owner token of the claim. `key` is the storage id built by
 * `scopedKeyId()` (a hash: never a raw client key); implementations add their own prefix.
 *
 * Implementations throw `IdempotencyStoreError` when the store cannot be reached or answers
 * something unreadable; they never throw for "already claimed" or "not the owner".
 *
 * @publicApi
 */
export abstract class IdempotencyStore {
  /**
   * Atomically creates an `in_progress` record owned by `request.ownerToken` when the key is
   * absent or its record has expired (`expiresAtMs <= now`); otherwise returns the existing
   * record unchanged. The new record's `fencingToken` is 1.
   */
  abstract claim(key: string, request: ClaimRequest): Promise<ClaimResult>;

  /**
   * Compare-and-set takeover of a stale claim: when the record is `in_progress`, owned by
   * `expectedOwnerToken` and its lease has lapsed (`leaseExpiresAtMs <= now`: an owner that
   * renewed in the meantime keeps its claim), replaces owner token, fingerprint and lease
   * (fencing token + 1, `createdAtMs` kept, `expiresAtMs` = now + ttl). When the key is absent or
   * expired, claims it as `claim` would. Otherwise returns the record as it is.
   */
  abstract takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest): Promise<ClaimResult>;

  /**
   * Marks the record `completed` with `response` when it is `in_progress` and owned by
   * `ownerToken`. Keeps `expiresAtMs`. Returns false (and writes nothing) otherwise.
   */
  abstract complete(key: string, ownerToken: string, response: StoredResponse): Promise<boolean>;

  /** Deletes the record when it is `in_progress` and owned by `ownerToken`; false otherwise. */
  abstract release(key: string, ownerToken: string): Promise<boolean>;

  /**
   * Renews the lease (`leaseExpiresAtMs` = now + leaseMs, and `expiresAtMs` pushed to at least
   * that, so a record never expires under a live claim) when the record is `in_progress` and
   * owned by `ownerToken`; false otherwise (the claim is lost).
   */
  abstract extend(key: string, ownerToken: string, leaseMs: number): Promise<boolean>;

  /** The live record, or undefined when absent or expired. */
  abstract get(key: string): Promise<IdempotencyRecord | undefined>;

  /**
   * Writes `record` as it is (used to repair the fast tier from the durable tier) unless a
   * record already exists for the key. Returns true when it wrote.
   */
  abstract restore(key: string, record: IdempotencyRecord): Promise<boolean>;

  /**
   * Resolves when the record of `key` may have changed state (completed or released), or after
   * `timeoutMs` at the latest. Used by `inProgress: 'wait'` so waiters do not busy-poll.
   * The default waits the whole timeout; stores with a notification channel override it.
   */
  waitForChange(key: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, timeoutMs).unref());
  }
}
