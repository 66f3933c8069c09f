import type { IdempotencyIsolationLevel } from '../interfaces/idempotency-module-options.interface.js';
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
 * How the engine asks a durable store to open a route's transaction (`claimInTransaction`,
 * `transaction`).
 *
 * @publicApi
 */
export interface DurableTransactionOptions {
  /** The isolation level the transaction BEGINs at; undefined: the database's default. */
  readonly isolationLevel?: IdempotencyIsolationLevel;
  /** What the transaction serves (the route's operation, `POST /orders`), for the store's warnings. */
  readonly label?: string;
  /**
   * The caller of `claimInTransaction` commits as soon as `complete` answers true, and does
   * nothing else in between (the engine does so): the store may then send the COMMIT with the
   * completion (one round trip on PostgreSQL), `complete` answering true once the row is completed
   * and `commit` reporting how the COMMIT went. Without it, `complete` never commits.
   * @default false
   */
  readonly commitOnComplete?: boolean;
}

/**
 * A transaction that `DurableIdempotencyStore.claimInTransaction` opened with the claim's row
 * inserted `in_progress` as its first statement, still uncommitted: a duplicate's insert of the
 * same key waits for it (the unique index) until it commits or rolls back, up to the store's
 * lock timeout. The handler writes through `manager`, the engine completes the row with
 * `complete` and commits once; the row is never committed `in_progress`.
 *
 * Exactly one of `commit` or `rollback` must end it (a rollback after either is a no-op); until
 * then it holds a database connection (and, on an embedded single-connection database, the
 * store's exclusive section).
 *
 * @publicApi
 */
export interface DurableClaimTransaction extends DurableTransaction {
  /** The row as the claim inserted it (`in_progress`, owned by the claim's token), uncommitted. */
  readonly record: IdempotencyRecord;
  /**
   * Marks where the handler's writes begin (right after the claim's insert) and returns what
   * undoes them, the claim staying in place: a failure the outcome policy stores is then
   * completed in this same transaction (docs/protocol-model.md). Call it once, before the handler.
   */
  savepoint(): Promise<() => Promise<void>>;
  /**
   * Runs `work` (the handler) where it must run. A store whose transactions hold an exclusive
   * section (the TypeORM store on sql.js) runs it in the async context the claim was made in,
   * inside that section, so the application's own serialized calls made by the handler join the
   * transaction instead of waiting for it to end; other stores just call `work`.
   */
  run<T>(work: () => Promise<T>): Promise<T>;
  /** Marks the claim's row `completed` with `response`, in the transaction; false if the row is not the claim's any more. */
  complete(response: StoredResponse): Promise<boolean>;
  /** Commits: the business writes and the completed row become visible together. Rejects with `IdempotencyStoreError` when the commit fails (its outcome is then unknown). */
  commit(): Promise<void>;
  /** Rolls back (the claim's row goes with it) and frees the connection. Never rejects. */
  rollback(): Promise<void>;
}

/**
 * What `claimInTransaction` answers:
 * - `claimed`: the row is inserted in an open transaction (see {@link DurableClaimTransaction});
 * - `existing`: a committed row holds the key (completed, another payload's, or a committed
 *   `in_progress` row of a non-transactional route or of an older version), returned as it is
 *   with the database's clock; nothing is left open;
 * - `busy`: another transaction holds an uncommitted claim of the key for longer than the
 *   store's lock timeout (its handler is still at work); nothing is left open.
 *
 * @publicApi
 */
export type TransactionalClaimResult =
  | { kind: 'claimed'; transaction: DurableClaimTransaction }
  | { kind: 'existing'; record: IdempotencyRecord; nowMs: number }
  | { kind: 'busy' };

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
   * OPTIONAL. The durable claim of a `transactional` route as the first statement of its
   * business transaction: opens a transaction and inserts the `in_progress` row owned by
   * `request.ownerToken` (insert-if-absent, as `claim`). A duplicate's insert waits for an
   * uncommitted row of the key (mutual exclusion even when the fast tier lost the record), at
   * most the store's lock timeout, and then answers `busy`; once that transaction commits it
   * answers `existing` with the committed row, once it rolls back it inserts. An expired row is
   * replaced in the transaction (fencing + 1), as `claim` does. Any other row: the transaction is
   * rolled back and the row is returned (`existing`).
   *
   * The engine then runs the handler on `transaction.manager`, completes the row with
   * `transaction.complete` and commits: one transaction, one commit, and no `extend` of the row
   * (its lease is the open transaction itself).
   *
   * A store without it keeps working: the engine falls back to `claim` (committed) before the
   * handler, then `transaction()` around it (one more commit, and a duplicate answers from the
   * committed `in_progress` row instead of waiting).
   *
   * @example
   * const claimed = await durableStore.claimInTransaction?.(key, { ownerToken, fingerprint, leaseMs: 30_000, ttlMs: 86_400_000 });
   * if (claimed?.kind === 'claimed') {
   *   const { transaction } = claimed;
   *   try {
   *     const undoWrites = await transaction.savepoint();
   *     const response = await transaction.run(() => handler(transaction.manager)); // business writes
   *     if (response.statusCode === 402) await undoWrites(); // a failure the policy stores
   *     if (await transaction.complete(response)) await transaction.commit();
   *   } finally {
   *     await transaction.rollback(); // a no-op after commit; never leave it open
   *   }
   * }
   */
  claimInTransaction?(
    key: string,
    request: ClaimRequest,
    options?: DurableTransactionOptions,
  ): Promise<TransactionalClaimResult>;

  /**
   * OPTIONAL. True when `error` (thrown by the store, or by the handler's own statements in a
   * store transaction) says the database rolled the transaction back to resolve a conflict: a
   * serialization failure or a deadlock (SQLSTATE `40001`, `40P01`). Nothing of that transaction
   * committed, even when it was raised by the COMMIT itself: the engine frees the key and answers
   * `503` with a short `Retry-After` instead of treating the outcome as unknown.
   */
  isSerializationFailure?(error: unknown): boolean;

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
    options?: DurableTransactionOptions,
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
