import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';

/** A storage id no scoped key can have (ids are 32 hex characters): read by the default `ping()`. */
export const PING_PROBE_ID = 'health-probe';

/** @internal The error of an optional store operation a store does not implement. */
export function unsupported(store: object, operation: string): Error {
  return new TypeError(
    `${store.constructor.name} does not implement ${operation}(): use a store of this library that does ` +
      '(memory, Redis, TypeORM), or implement it in your store.',
  );
}

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
  /** Record lifetime in ms from the claim (docs/contract.md B.10). */
  ttlMs: number;
}

/**
 * Result of `claim` / `takeOver`. A discriminated union: `claimed` means the caller owns the
 * record now; `existing` hands back the record somebody else holds, with the store's clock.
 *
 * @publicApi
 */
export type ClaimResult =
  { kind: 'claimed'; record: IdempotencyRecord } | { kind: 'existing'; record: IdempotencyRecord; nowMs: number };

/**
 * One `in_progress` record found by `listInProgress`: its storage id (a hash, never a raw key)
 * and the record as the store holds it.
 *
 * @publicApi
 */
export interface InProgressEntry {
  /** The storage id (`buildScopedKey().id`). */
  key: string;
  record: IdempotencyRecord;
  /** The store's clock when it read the record, so ages are measured on one clock. */
  nowMs: number;
}

/**
 * Which records `forceDelete` may remove: `in-progress` leaves a completed record in place (its
 * response must keep answering retries), `any` deletes whatever is there, unreadable values too.
 *
 * @publicApi
 */
export type ForceDeleteScope = 'in-progress' | 'any';

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
   * Up to `limit` live `in_progress` records whose age by the store's clock (`nowMs -
   * createdAtMs`) is at least `olderThanMs`, oldest first when the store can sort (an index)
   * and in scan order otherwise; a record the store cannot read is skipped (a `get` of it reports
   * why). For inspection (`IdempotencyAdmin`), not for the request path.
   * The default reports that the store cannot list.
   */
  listInProgress(_olderThanMs: number, _limit: number): Promise<InProgressEntry[]> {
    return Promise.reject(unsupported(this, 'listInProgress'));
  }

  /**
   * Deletes the record of `key` regardless of its owner (an operator's repair, audited by
   * `IdempotencyAdmin`), atomically with the `scope` check, and wakes its waiters. An owner that
   * still runs then fails its fencing check: its `complete`, `release` and `extend` answer false.
   * Returns true when it deleted a record. The default reports that the store cannot do it.
   */
  forceDelete(_key: string, _scope: ForceDeleteScope = 'in-progress'): Promise<boolean> {
    return Promise.reject(unsupported(this, 'forceDelete'));
  }

  /**
   * Resolves when the store answers a trivial request, rejects with `IdempotencyStoreError`
   * otherwise (for health checks). The default reads a record that never exists.
   */
  async ping(): Promise<void> {
    await this.get(PING_PROBE_ID);
  }

  /**
   * Resolves when the record of `key` may have changed state (completed or released), or after
   * `timeoutMs` at the latest. Used by `inProgress: 'wait'` so waiters do not busy-poll.
   * The default waits the whole timeout; stores with a notification channel override it.
   */
  waitForChange(key: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, timeoutMs).unref());
  }
}
