import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  PING_PROBE_ID,
  unsupported,
  type ClaimRequest,
  type ClaimResult,
  type ForceDeleteScope,
  type InProgressEntry,
} from './idempotency-store.js';

/**
 * A database transaction opened by the durable store for a `transactional` route. The handler
 * writes its business rows through `manager` (a TypeORM `EntityManager` for the TypeORM store),
 * and the engine completes the idempotency record through the same transaction, so both commit
 * or neither does (DESIGN "The flow of one request", step 6).
 *
 * @publicApi
 */
export interface DurableTransaction {
  /** The ORM handle of the transaction (a TypeORM `EntityManager`). Typed loosely: core never imports an ORM. */
  readonly manager: unknown;
  /**
   * Marks where the handler's writes begin, and returns what undoes them while the transaction
   * (and the lock it holds on the row) stays open: a failure the outcome policy stores (a 402)
   * is then completed in the same transaction, so no other request can take the row over between
   * a rollback and that completion (found by the protocol model, docs/protocol-model.md).
   * Optional: without it the engine rolls the whole transaction back, completes afterwards, and
   * answers `409` if its claim was lost meanwhile.
   */
  savepoint?(): Promise<() => Promise<void>>;
}

/**
 * The durable tier: the authority that survives the loss of the fast tier (DESIGN "Durable
 * tier"). One row per scoped key with a unique constraint on it, the same states, owner token,
 * fencing counter, lease and expiry as the fast tier (`IdempotencyRecord`).
 *
 * Clock: leases and expiry are judged by the DATABASE's clock, read in the statement that decides
 * (as the Redis store uses Redis `TIME`), never by the application host's `Date.now()`: a node
 * whose clock runs ahead must not see a live lease as lapsed and take over a running claim. Every
 * time a store writes (`createdAtMs`, `leaseExpiresAtMs`, `expiresAtMs`) and every `nowMs` it
 * returns comes from that clock; callers compare a record's times only with such a `nowMs`.
 * (An embedded database such as sql.js lives in the process: its clock is the process clock.)
 *
 * Implementations throw `IdempotencyStoreError` (tier `durable`) when the database cannot be
 * reached or a row cannot be read; never for "already claimed" or "not the owner".
 *
 * @publicApi
 */
export abstract class DurableIdempotencyStore {
  /**
   * Insert-if-absent of an `in_progress` row owned by `request.ownerToken` (`INSERT ... ON
   * CONFLICT DO NOTHING` or the dialect's equivalent). An expired row (`expiresAtMs <= now`) is
   * replaced as if absent. Otherwise returns the existing row unchanged, with `nowMs`: the
   * database's clock it decided by.
   * `fencingToken` of the new row is 1 (or, when it replaces an expired row, that row's + 1).
   */
  abstract claim(key: string, request: ClaimRequest): Promise<ClaimResult>;

  /**
   * Compare-and-set takeover: when the row is `in_progress`, owned by `expectedOwnerToken` and
   * its lease has lapsed, gives it the new owner token, fingerprint and lease (fencing + 1,
   * `createdAtMs` kept, `expiresAtMs` = now + ttl). Absent or expired: claims as `claim` does.
   * Otherwise (or when the row is locked by a live transaction for longer than the store's lock
   * timeout) returns the row as it is.
   */
  abstract takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest): Promise<ClaimResult>;

  /**
   * Marks the row `completed` with `response` when it is `in_progress` and owned by `ownerToken`.
   * With `transaction`, the update runs inside it (and the row was locked by `transaction()`).
   * Returns false and writes nothing otherwise.
   */
  abstract complete(
    key: string,
    ownerToken: string,
    response: StoredResponse,
    transaction?: DurableTransaction,
  ): Promise<boolean>;

  /** Deletes the row when it is `in_progress` and owned by `ownerToken`; false otherwise. */
  abstract release(key: string, ownerToken: string): Promise<boolean>;

  /**
   * Renews the lease of an `in_progress` row owned by `ownerToken` (and pushes `expiresAtMs` to at
   * least the new lease, so a row never expires under a live claim); false otherwise.
   */
  abstract extend(key: string, ownerToken: string, leaseMs: number): Promise<boolean>;

  /** The live row, or undefined when absent or expired. */
  abstract get(key: string): Promise<IdempotencyRecord | undefined>;

  /**
   * Runs `work` in one database transaction that first locks the row of `key` if it is still
   * `in_progress` and owned by `ownerToken` (`SELECT ... FOR UPDATE` where the dialect has it),
   * so a takeover waits for a live transaction instead of running beside it. If the row is not
   * ours any more, rejects with `IdempotencyClaimLostError` before `work` runs. Commits when
   * `work` resolves, rolls back when it rejects (and rethrows).
   */
  abstract transaction<T>(
    key: string,
    ownerToken: string,
    work: (transaction: DurableTransaction) => Promise<T>,
  ): Promise<T>;

  /**
   * Deletes up to `batchSize` rows whose `expiresAtMs <= nowMs` (by default: the database's clock),
   * and returns how many it deleted. Safe to run on many instances at once (each row is deleted
   * once; no instance waits on another).
   */
  abstract deleteExpired(batchSize: number, nowMs?: number): Promise<number>;

  /**
   * Up to `limit` live `in_progress` rows created at least `olderThanMs` ago (database clock),
   * oldest first, by an indexed query; a row the store cannot read is skipped (a `get` of it
   * reports why). For inspection (`IdempotencyAdmin`), not the request path.
   * The default reports that the store cannot list.
   */
  listInProgress(_olderThanMs: number, _limit: number): Promise<InProgressEntry[]> {
    return Promise.reject(unsupported(this, 'listInProgress'));
  }

  /**
   * Deletes the row of `key` regardless of its owner (an operator's repair), in one statement
   * guarded by `scope`. The owner, if it still runs, then fails its fencing check (`complete`,
   * `release`, `extend` and `transaction` find no row of theirs). Returns true when it deleted a
   * row. The default reports that the store cannot do it.
   */
  forceDelete(_key: string, _scope: ForceDeleteScope = 'in-progress'): Promise<boolean> {
    return Promise.reject(unsupported(this, 'forceDelete'));
  }

  /**
   * Resolves when the database answers a trivial query, rejects with `IdempotencyStoreError`
   * otherwise (for health checks). The default reads a row that never exists.
   */
  async ping(): Promise<void> {
    await this.get(PING_PROBE_ID);
  }
}
