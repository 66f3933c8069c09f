/**
 * `TypeOrmIdempotencyStore`: the durable-tier contract on TypeORM. Its SQL, DataSource handling,
 * sql.js queue and row codec live beside it (idempotency-records.sql.ts,
 * idempotency-records.connection.ts, sqljs-exclusive-queue.ts, idempotency-record.codec.ts).
 */
import type { DataSource, QueryRunner } from 'typeorm';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  DurableIdempotencyStore,
  type DurableTransaction,
  type DurableTransactionOptions,
  type TransactionalClaimResult,
} from '../stores/durable-idempotency-store.js';
import type { ClaimRequest, ClaimResult, ForceDeleteScope, InProgressEntry } from '../stores/idempotency-store.js';
import { checkDuration, checkForceDeleteScope, checkListArguments } from '../stores/store-arguments.js';
import {
  affectedRows,
  changedOne,
  checkKey,
  checkRequest,
  checkStoredResponse,
  checkToken,
  decodeRecord,
  readableEntry,
  recordWithClock,
  single,
  type Row,
} from './idempotency-record.codec.js';
import { isSupportedDataSourceType, unsupportedDataSourceType } from './idempotency-record.entity.js';
import { IdempotencyRecordsConnection } from './idempotency-records.connection.js';
import { isMysqlDeadlock } from './idempotency-records.mysql.js';
import { isSerializationFailure, LOCK_NOT_AVAILABLE, sqlState } from './idempotency-records.sql.js';
import { checkPartitionedIsolation, checkPartitioning, PartitionMaintenance } from './partition-maintenance.js';
import { NO_PARTITION_FOR_ROW } from './partitioned-records.sql.js';
import { RouteTransactions } from './route-transactions.js';
import type { TypeOrmIdempotencyStoreOptions } from './typeorm-idempotency-store.options.js';
import { exclusiveSectionFor } from './sqljs-exclusive-queue.js';

const DEFAULT_LOCK_TIMEOUT_MS = 2_000;
/**
 * A claim reads the row after its insert found one; a concurrent release or reaper may delete it
 * in between, and a concurrent claim may replace it. Each of those is a retry; this many in a
 * row means something keeps rewriting the row, and the claim gives up with a store error.
 */
const MAX_CLAIM_ATTEMPTS = 5;

/**
 * The durable tier on TypeORM, over the application's own DataSource: PostgreSQL, MySQL 8 or
 * MariaDB 10.11+ (`mysql2`; docs/durable-tier.md "MySQL 8 and MariaDB" for how its statements
 * and locks differ), or SQLite through sql.js for the embedded mode. One row per scoped key in `idempotency_records`
 * (create it with {@link IDEMPOTENCY_TYPEORM_MIGRATIONS}).
 *
 * - **Connections**: it uses the DataSource you pass and never opens, initializes or closes a
 *   connection of its own. Give a PostgreSQL DataSource `extra: { connectionTimeoutMillis }`
 *   (and a `statement_timeout` if you want one): without them, a server that accepts TCP but
 *   does not answer makes calls wait as long as the pool does.
 * - **Atomicity**: every write is one statement guarded by its `WHERE` (`key`, owner token,
 *   `state = 'in_progress'`, not expired), judged by the rows it changed. Claims are
 *   `INSERT ... ON CONFLICT ("key") DO NOTHING`; an expired row is replaced by an `UPDATE`
 *   guarded by `expires_at_ms <= now`, and the new claim's fencing token is the old one + 1, so
 *   a zombie of the expired record never holds the same token as the new owner.
 * - **Claims in a transaction** (`claimInTransaction()`, transactional routes): the claim's
 *   INSERT is the first statement of the business transaction and is completed in it, one
 *   COMMIT; a duplicate's INSERT waits for the uncommitted row at most `lockTimeoutMs`, then
 *   answers `busy`. The row is never committed `in_progress`.
 * - **Transactions** (`transaction()`, stores' fallback and routes claimed before): the row is locked (`SELECT ... FOR UPDATE` on
 *   PostgreSQL) and checked to be ours before `work` runs; the handler's writes and `complete`
 *   commit together. While the lock is held, `takeOver` waits at most `lockTimeoutMs` and then
 *   answers `existing`; `claim`, `get` and `deleteExpired` do not wait (they read the committed
 *   row, or skip it); the owner's `extend` (its heartbeat) runs inside the transaction.
 * - **Partitioned table** (`partitioning`, PostgreSQL): a claim takes a per-key advisory lock and
 *   reads the key's row in every attached partition; `deleteExpired` drops whole partitions whose
 *   rows have all expired (docs/capacity.md, "The partitioned table").
 * - **SQLite (sql.js)**: there are no row locks and a single connection, so every operation runs
 *   in an exclusive section (see {@link TypeOrmIdempotencyStoreOptions.runExclusive}); an
 *   operation waits for a running `transaction()` to finish, without `lockTimeoutMs`.
 * - **Clock**: the database's (`statement_timestamp()` on PostgreSQL, SQLite's `'now'`), read in
 *   the statement that decides, so hosts whose clocks drift apart agree on every lease and expiry;
 *   the `nowMs` a claim or takeover returns is that clock's.
 * - **Errors**: an unreachable database, a missing table, an uninitialized or destroyed
 *   DataSource and a row that cannot be read (unknown state, a number that is not one, headers
 *   that are not JSON) reject with `IdempotencyStoreError` (tier `durable`). Errors of `work` in
 *   `transaction()` and `IdempotencyClaimLostError` propagate as they are; bad arguments throw
 *   `TypeError` / `RangeError`.
 *
 * @example
 * IdempotencyModule.forRootAsync({
 *   inject: [DataSource],
 *   useFactory: (dataSource: DataSource) => ({ durableStore: new TypeOrmIdempotencyStore(dataSource) }),
 * })
 * @example
 * // sql.js: the store's operations queue in the same line as the application's own
 * // transactions (the sample service's TransactionRunner.exclusive() is such a serializer).
 * new TypeOrmIdempotencyStore(dataSource, { runExclusive: (work) => transactionRunner.exclusive(work) })
 * @publicApi
 */
export class TypeOrmIdempotencyStore extends DurableIdempotencyStore {
  /** Runs the statements on the DataSource: operations, transactions, lock waits, failures. */
  private readonly db: IdempotencyRecordsConnection;
  /** The partitions of the partitioned table, with the `partitioning` option. */
  private readonly partitions?: PartitionMaintenance;
  /**
   * @param dataSource the application's DataSource (`postgres`, `mysql`, `mariadb` or `sqljs`). It may still be
   *   uninitialized when the store is created; operations need it initialized.
   * @throws IdempotencyConfigurationError for another DataSource type.
   */
  constructor(
    private readonly dataSource: DataSource,
    options: TypeOrmIdempotencyStoreOptions = {},
  ) {
    super();
    const type = dataSource.options.type;
    if (!isSupportedDataSourceType(type)) throw unsupportedDataSourceType(type);
    const dialect = type === 'postgres' ? 'postgres' : type === 'sqljs' ? 'sqlite' : 'mysql';
    const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
    checkDuration('lockTimeoutMs', lockTimeoutMs);
    if (options.runExclusive !== undefined && typeof options.runExclusive !== 'function') {
      throw new TypeError('runExclusive must be a function');
    }
    const exclusive = exclusiveSectionFor(dialect, options.runExclusive);
    if (options.propagate !== undefined && typeof options.propagate !== 'function') {
      throw new TypeError('propagate must be a function');
    }
    const outsideWrites = options.outsideWrites ?? (process.env.NODE_ENV === 'production' ? 'ignore' : 'warn');
    if (!['warn', 'throw', 'ignore'].includes(outsideWrites)) {
      throw new TypeError(`outsideWrites must be 'warn', 'throw' or 'ignore', got ${String(outsideWrites)}`);
    }
    const routes = new RouteTransactions(
      dataSource,
      options.propagate,
      dialect === 'sqlite' ? 'ignore' : outsideWrites,
    );
    if (options.preparedStatements !== undefined && typeof options.preparedStatements !== 'boolean') {
      throw new TypeError('preparedStatements must be a boolean');
    }
    const partitionMs = checkPartitioning(options.partitioning, dialect);
    this.db = new IdempotencyRecordsConnection(
      dataSource,
      dialect,
      lockTimeoutMs,
      exclusive,
      routes,
      options.preparedStatements ?? true,
      partitionMs !== undefined,
    );
    if (partitionMs !== undefined) {
      this.partitions = new PartitionMaintenance(this.db, () => this.db.partitionedNames(), partitionMs);
    }
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    checkKey(key);
    checkRequest(request);
    await this.partitions?.ensureAhead();
    return this.db.operation('claim', (runner) => this.acquire(runner, key, request, undefined));
  }

  /**
   * The claim of a `transactional` route as its transaction's first statement (see
   * `DurableIdempotencyStore.claimInTransaction`). PostgreSQL: `BEGIN`, then one INSERT that also
   * sets `lock_timeout` to `lockTimeoutMs` for itself (a duplicate waits at most that long for the
   * uncommitted row, then answers `busy`); `savepoint()` restores the application's
   * `lock_timeout` and takes the savepoint in one round trip; `complete` is one UPDATE; one
   * COMMIT. The store's statements go to the pg client directly; the handler gets the TypeORM
   * `EntityManager` of the same transaction. sql.js: the transaction holds the store's exclusive
   * section (and the one connection) until it commits or rolls back.
   */
  override async claimInTransaction(
    key: string,
    request: ClaimRequest,
    options: DurableTransactionOptions = {},
  ): Promise<TransactionalClaimResult> {
    checkKey(key);
    checkRequest(request);
    if (this.partitions) {
      checkPartitionedIsolation(options.isolationLevel ?? this.dataSource.options.isolationLevel);
      await this.partitions.ensureAhead();
    }
    const claim = () =>
      this.db.claimInTransaction(
        key,
        request,
        (response) => {
          checkStoredResponse(response);
          return this.completionParams(key, request.ownerToken, response);
        },
        options,
      );
    try {
      return await claim();
    } catch (error) {
      // Partitioned: this host's clock judged the partitions ahead enough, the database's did not.
      if (!this.partitions || sqlState((error as { cause?: unknown }).cause) !== NO_PARTITION_FOR_ROW) throw error;
      await this.partitions.ensureAhead(true);
      return claim();
    }
  }

  /**
   * SQLSTATE `40001` (serialization failure) or `40P01` (deadlock) on PostgreSQL, error 1213
   * (deadlock) on MySQL / MariaDB, on the error or its causes: the transaction was rolled back.
   */
  override isSerializationFailure(error: unknown): boolean {
    return isSerializationFailure(error) || isMysqlDeadlock(error);
  }

  async takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest): Promise<ClaimResult> {
    checkKey(key);
    checkToken('expectedOwnerToken', expectedOwnerToken);
    checkRequest(request);
    await this.partitions?.ensureAhead();
    return this.db.operation('takeOver', (runner) => this.acquire(runner, key, request, expectedOwnerToken));
  }

  /**
   * With `transaction`, runs on that transaction's connection, without queueing (it must be the
   * one `transaction()` handed to `work`, still running: anything else is a `TypeError`).
   */
  async complete(
    key: string,
    ownerToken: string,
    response: StoredResponse,
    transaction?: DurableTransaction,
  ): Promise<boolean> {
    checkKey(key);
    checkToken('ownerToken', ownerToken);
    checkStoredResponse(response);
    const params = this.completionParams(key, ownerToken, response);
    if (transaction === undefined) {
      return this.db.operation('complete', async (runner) =>
        changedOne(await this.db.run(runner, this.db.sql.complete, params)),
      );
    }
    const runner = this.db.runnerOf(transaction);
    if (!runner) {
      throw new TypeError(
        'complete() was given a transaction that is not open: pass the one transaction() gave to its work, before work settles',
      );
    }
    try {
      return changedOne(await this.db.run(runner, this.db.sql.complete, params));
    } catch (error) {
      throw this.db.failure('complete', error);
    }
  }

  async release(key: string, ownerToken: string): Promise<boolean> {
    checkKey(key);
    checkToken('ownerToken', ownerToken);
    return this.db.operation('release', async (runner) =>
      changedOne(await this.db.run(runner, this.db.sql.release, [key, ownerToken])),
    );
  }

  /**
   * While the owner's own `transaction()` on this store holds the row, the renewal runs inside
   * that transaction: the row is already locked by it, so a renewal from outside would wait for
   * the commit (and then find the row completed), and on SQLite it would queue behind the whole
   * transaction. It commits or rolls back with the transaction.
   */
  async extend(key: string, ownerToken: string, leaseMs: number): Promise<boolean> {
    checkKey(key);
    checkToken('ownerToken', ownerToken);
    checkDuration('leaseMs', leaseMs);
    const renew = async (runner: QueryRunner): Promise<boolean> =>
      changedOne(await this.db.run(runner, this.db.sql.extend, [key, ownerToken, leaseMs]));
    const held = this.db.runnerHolding(key, ownerToken);
    if (!held) return this.db.operation('extend', renew);
    try {
      return await renew(held);
    } catch (error) {
      throw this.db.failure('extend', error);
    }
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    checkKey(key);
    return this.db.operation('get', async (runner) => {
      const rows = (await this.db.run(runner, this.db.sql.selectLive, [key])).records;
      return rows.length === 0 ? undefined : decodeRecord(single(rows));
    });
  }

  /**
   * On PostgreSQL the transaction has its own pooled connection and holds the row lock until it
   * ends. On SQLite it holds the store's exclusive section (and the only connection) until it
   * ends, so keep `work` short there; store calls made from inside `work` run at once, inside
   * the transaction, and roll back with it. The handle given to `work` works for `complete` until
   * `work` settles.
   */
  async transaction<T>(
    key: string,
    ownerToken: string,
    work: (transaction: DurableTransaction) => Promise<T>,
    options: DurableTransactionOptions = {},
  ): Promise<T> {
    checkKey(key);
    checkToken('ownerToken', ownerToken);
    if (typeof work !== 'function') throw new TypeError('work must be a function');
    return this.db.transaction(key, ownerToken, work, options);
  }

  /**
   * One statement per batch. Call it in a loop until it returns less than `batchSize`; a row a
   * live transaction holds is skipped (PostgreSQL), and deleted by a later run. Without `nowMs`,
   * expiry is judged by the database's clock.
   */
  async deleteExpired(batchSize: number, nowMs?: number): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize <= 0) {
      throw new RangeError(`batchSize must be a positive integer, got ${batchSize}`);
    }
    if (nowMs !== undefined && (!Number.isSafeInteger(nowMs) || nowMs < 0)) {
      throw new RangeError(`nowMs must be a non-negative integer (epoch ms), got ${nowMs}`);
    }
    if (this.partitions) return this.partitions.dropExpired(nowMs);
    return this.db.operation('deleteExpired', async (runner) =>
      this.db.dialect === 'mysql'
        ? this.db.mysql.deleteExpired(runner, batchSize, nowMs)
        : affectedRows(await this.db.run(runner, this.db.sql.deleteExpired, [nowMs ?? null, batchSize])),
    );
  }

  /** Oldest first, through the `(state, created_at_ms)` index. A row it cannot read is skipped (`get` of it says why). */
  override async listInProgress(olderThanMs: number, limit: number): Promise<InProgressEntry[]> {
    checkListArguments(olderThanMs, limit);
    return this.db.operation('listInProgress', async (runner) => {
      const rows = (await this.db.run(runner, this.db.sql.listInProgress, [olderThanMs, limit])).records as Row[];
      return rows.flatMap((row) => {
        const entry = readableEntry(row);
        return entry ? [entry] : [];
      });
    });
  }

  /**
   * One guarded DELETE. A row locked by a live `transaction()` (PostgreSQL) belongs to a handler
   * that is still running: after `lockTimeoutMs` the call rejects with `IdempotencyStoreError`
   * rather than wait for it, and deletes nothing.
   */
  override async forceDelete(key: string, scope: ForceDeleteScope = 'in-progress'): Promise<boolean> {
    checkKey(key);
    checkForceDeleteScope(scope);
    return this.db.operation('forceDelete', async (runner) => {
      const deleted =
        this.db.dialect === 'mysql'
          ? await this.db.mysql.forceDelete(runner, key, scope)
          : scope === 'any'
            ? await this.db.writeWaitingForLock(runner, this.db.sql.forceDeleteAny, [key])
            : await this.db.writeWaitingForLock(runner, this.db.sql.forceDeleteInProgress, [key]);
      if (deleted === 'locked') {
        throw new IdempotencyStoreError(
          `Durable idempotency store (${this.db.dialect}): forceDelete of ${key} waited ${this.db.lockTimeoutMs} ms ` +
            'for the row lock of a running transaction: its handler is still at work. Retry once it has finished.',
          'durable',
        );
      }
      return typeof deleted === 'boolean' ? deleted : deleted.length === 1;
    });
  }

  /** The parameters of the `complete` statement. */
  private completionParams(key: string, ownerToken: string, response: StoredResponse): unknown[] {
    return [
      key,
      ownerToken,
      response.statusCode,
      JSON.stringify(response.headers),
      response.body === undefined ? null : response.body,
      this.db.boolean(response.bodyOmitted === true),
    ];
  }

  /** `claim`, or with `expectedOwnerToken` `takeOver`: each attempt re-reads what it lost to. */
  private async acquire(
    runner: QueryRunner,
    key: string,
    request: ClaimRequest,
    expectedOwnerToken: string | undefined,
  ): Promise<ClaimResult> {
    if (this.db.dialect === 'mysql') return this.db.mysql.acquire(runner, key, request, expectedOwnerToken);
    for (let attempt = 1; attempt <= MAX_CLAIM_ATTEMPTS; attempt += 1) {
      if (expectedOwnerToken !== undefined) {
        const taken = await this.db.writeWaitingForLock(runner, this.db.sql.takeOver, [
          key,
          expectedOwnerToken,
          request.ownerToken,
          request.fingerprint,
          request.leaseMs,
          request.ttlMs,
        ]);
        if (taken === 'locked') {
          const current = await this.read(runner, key);
          if (current) return { kind: 'existing', ...current };
          continue;
        }
        if (taken.length > 0) return { kind: 'claimed', record: decodeRecord(single(taken)) };
      }
      const claimParams = [key, request.fingerprint, request.ownerToken, request.leaseMs, request.ttlMs];
      const inserted = await this.insert(runner, claimParams);
      if (inserted === 'locked') {
        // Partitioned: another claim of the key held its lock, or a live transaction() its expired row.
        const current = await this.read(runner, key);
        if (current) return { kind: 'existing', ...current };
        continue;
      }
      if (inserted.length > 0) return { kind: 'claimed', record: decodeRecord(single(inserted)) };
      const current = await this.read(runner, key);
      if (!current) continue;
      if (current.record.expiresAtMs > current.nowMs) return { kind: 'existing', ...current };
      const replaced = await this.db.writeWaitingForLock(runner, this.db.sql.replaceExpired, claimParams);
      // An expired row locked by a live transaction: its owner is still at work, as in takeOver.
      if (replaced === 'locked') return { kind: 'existing', ...current };
      if (replaced.length > 0) return { kind: 'claimed', record: decodeRecord(single(replaced)) };
    }
    throw new IdempotencyStoreError(
      `Durable idempotency store (${this.db.dialect}): a claim did not settle after ${MAX_CLAIM_ATTEMPTS} attempts ` +
        'because the row kept changing under it; retry the request.',
      'durable',
    );
  }

  /**
   * The claim's insert. Partitioned: the claim function, whose lock waits end after
   * `lockTimeoutMs` ('locked'); a row of a time no partition covers yet has them created first.
   */
  private async insert(runner: QueryRunner, claimParams: unknown[]): Promise<Row[] | 'locked'> {
    try {
      return (await this.db.run(runner, this.db.sql.insert, claimParams)).records;
    } catch (error) {
      if (!this.partitions) throw error;
      const state = sqlState(error);
      if (state === LOCK_NOT_AVAILABLE) return 'locked';
      if (state !== NO_PARTITION_FOR_ROW) throw error;
      await this.partitions.ensureAhead(true);
      return (await this.db.run(runner, this.db.sql.insert, claimParams)).records;
    }
  }

  /** The row as it is, expired or not, with the database's clock at the read. */
  private async read(
    runner: QueryRunner,
    key: string,
  ): Promise<{ record: IdempotencyRecord; nowMs: number } | undefined> {
    return recordWithClock((await this.db.run(runner, this.db.sql.select, [key])).records);
  }
}
