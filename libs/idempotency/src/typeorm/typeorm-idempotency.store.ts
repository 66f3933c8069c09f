import { AsyncLocalStorage } from 'node:async_hooks';
import type { DataSource, QueryRunner } from 'typeorm';
import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type {
  IdempotencyRecord,
  IdempotencyRecordState,
  StoredResponse,
} from '../interfaces/idempotency-record.interface.js';
import { DurableIdempotencyStore, type DurableTransaction } from '../stores/durable-idempotency-store.js';
import type { ClaimRequest, ClaimResult, ForceDeleteScope, InProgressEntry } from '../stores/idempotency-store.js';
import {
  checkClaimRequest,
  checkDuration,
  checkForceDeleteScope,
  checkListArguments,
  checkResponse,
} from '../stores/memory-idempotency.store.js';
import {
  IDEMPOTENCY_RECORDS_TABLE,
  isSupportedDataSourceType,
  unsupportedDataSourceType,
} from './idempotency-record.entity.js';

/**
 * Options of {@link TypeOrmIdempotencyStore}.
 *
 * @publicApi
 */
export interface TypeOrmIdempotencyStoreOptions {
  /**
   * SQLite (sql.js) only; ignored on PostgreSQL. Runs `work` when no other transaction or query
   * of the application runs on the database, and resolves with its result.
   *
   * sql.js has ONE connection. Two transactions that overlap on it do not isolate each other:
   * the second `BEGIN` becomes a savepoint of the first, a statement issued meanwhile joins
   * whichever transaction is open, and a rollback undoes other callers' writes. So every
   * operation of the store (each one a few statements, or a whole `transaction()`) must run
   * alone on it. Pass the serializer your application already uses for its own transactions, so
   * that the store's operations and yours queue in one line. It must run `work` at once when it
   * is called from inside work it is already running (a handler inside `transaction()` may call
   * the store again), or it deadlocks.
   *
   * Without it, the store queues its own operations one at a time. That is enough only when
   * nothing else opens transactions on the same DataSource while the store works.
   * @default a queue private to the store
   */
  runExclusive?: <T>(work: () => Promise<T>) => Promise<T>;
  /**
   * PostgreSQL only: how long, in ms, `takeOver` (and a `claim` that replaces an expired row)
   * waits for the row lock of a live `transaction()`. When the lock is still held after that,
   * its owner is alive and working: the call returns `existing` with the row as last committed.
   * @default 2000
   */
  lockTimeoutMs?: number;
}

const DEFAULT_LOCK_TIMEOUT_MS = 2_000;
/** Column lengths of the table (`varchar(64)`): SQLite does not enforce them, so the store does. */
const MAX_TEXT_LENGTH = 64;
/**
 * A claim reads the row after its insert found one; a concurrent release or reaper may delete it
 * in between, and a concurrent claim may replace it. Each of those is a retry; this many in a
 * row means something keeps rewriting the row, and the claim gives up with a store error.
 */
const MAX_CLAIM_ATTEMPTS = 5;
/** PostgreSQL SQLSTATE `lock_not_available`, raised when `lock_timeout` elapses. */
const LOCK_NOT_AVAILABLE = '55P03';

const IN_PROGRESS: IdempotencyRecordState = 'in_progress';
const COMPLETED: IdempotencyRecordState = 'completed';

/** Columns of a record, in the order every SELECT and RETURNING lists them. */
const RECORD_COLUMNS = [
  'state',
  'fingerprint',
  'owner_token',
  'fencing_token',
  'created_at_ms',
  'lease_expires_at_ms',
  'expires_at_ms',
  'response_status',
  'response_headers',
  'response_body',
  'response_body_omitted',
].join(', ');

type Dialect = 'postgres' | 'sqlite';
type Row = Record<string, unknown>;

/** The statements of one dialect, with the table's qualified name filled in. */
interface Statements {
  readonly insert: string;
  readonly replaceExpired: string;
  readonly takeOver: string;
  readonly select: string;
  readonly selectLive: string;
  readonly lockOwned: string;
  readonly complete: string;
  readonly release: string;
  readonly extend: string;
  readonly deleteExpired: string;
  readonly listInProgress: string;
  readonly forceDeleteInProgress: string;
  readonly forceDeleteAny: string;
}

/**
 * The database's clock in epoch ms, one value per statement, so that leases and expiry never
 * depend on the clocks of the application's hosts (as the Redis store uses `TIME`): a node whose
 * clock runs ahead cannot judge a live lease dead. PostgreSQL: `statement_timestamp()` is stable
 * within a statement and advances with each statement of a transaction (`now()` would stay at the
 * transaction's start, so a renewal inside `transaction()` would not move the lease). SQLite:
 * `'now'` is fixed within one step of a statement; under sql.js it is the process clock, as the
 * database lives in the process.
 */
const DATABASE_NOW_MS: Record<Dialect, string> = {
  postgres: '(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint',
  sqlite: "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)",
};

/**
 * Writes the statements once, with PostgreSQL's `$n` placeholders and `{now}` for the database's
 * clock; for SQLite the placeholders become `?n` (numbered, so a parameter used twice or out of
 * order binds the same value on both). Every time comparison and every time written is `{now}`
 * (plus a duration); a statement whose caller needs the clock it decided by returns it as `now_ms`.
 */
function statementsFor(dialect: Dialect, table: string): Statements {
  const rowLocks = dialect === 'postgres';
  const statements: Statements = {
    insert:
      `INSERT INTO ${table} ("key", state, fingerprint, owner_token, fencing_token, created_at_ms, ` +
      'lease_expires_at_ms, expires_at_ms, response_status, response_headers, response_body, response_body_omitted) ' +
      `VALUES ($1, '${IN_PROGRESS}', $2, $3, 1, {now}, {now} + $4, {now} + $5, NULL, NULL, NULL, FALSE) ` +
      `ON CONFLICT ("key") DO NOTHING RETURNING ${RECORD_COLUMNS}`,
    replaceExpired:
      `UPDATE ${table} SET state = '${IN_PROGRESS}', fingerprint = $2, owner_token = $3, ` +
      'fencing_token = fencing_token + 1, created_at_ms = {now}, lease_expires_at_ms = {now} + $4, expires_at_ms = {now} + $5, ' +
      'response_status = NULL, response_headers = NULL, response_body = NULL, response_body_omitted = FALSE ' +
      `WHERE "key" = $1 AND expires_at_ms <= {now} RETURNING ${RECORD_COLUMNS}`,
    takeOver:
      `UPDATE ${table} SET owner_token = $3, fingerprint = $4, fencing_token = fencing_token + 1, ` +
      'lease_expires_at_ms = {now} + $5, expires_at_ms = {now} + $6 ' +
      `WHERE "key" = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' ` +
      `AND lease_expires_at_ms <= {now} AND expires_at_ms > {now} RETURNING ${RECORD_COLUMNS}`,
    select: `SELECT ${RECORD_COLUMNS}, {now} AS now_ms FROM ${table} WHERE "key" = $1`,
    selectLive: `SELECT ${RECORD_COLUMNS} FROM ${table} WHERE "key" = $1 AND expires_at_ms > {now}`,
    lockOwned:
      `SELECT ${RECORD_COLUMNS} FROM ${table} ` +
      `WHERE "key" = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}` +
      (rowLocks ? ' FOR UPDATE' : ''),
    complete:
      `UPDATE ${table} SET state = '${COMPLETED}', response_status = $3, response_headers = $4, ` +
      'response_body = $5, response_body_omitted = $6 ' +
      `WHERE "key" = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    release:
      `DELETE FROM ${table} ` +
      `WHERE "key" = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    extend:
      // A live claim outlives its TTL: the row must not expire under a running handler.
      `UPDATE ${table} SET lease_expires_at_ms = {now} + $3, ` +
      'expires_at_ms = CASE WHEN expires_at_ms < {now} + $3 THEN {now} + $3 ELSE expires_at_ms END ' +
      `WHERE "key" = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    // SKIP LOCKED: instances reaping at once each take rows nobody else holds, and none waits
    // for a row a live transaction() has locked. $1 NULL: expired by the database's clock.
    deleteExpired:
      `DELETE FROM ${table} WHERE "key" IN (SELECT "key" FROM ${table} ` +
      'WHERE expires_at_ms <= COALESCE(CAST($1 AS BIGINT), {now}) ' +
      `ORDER BY expires_at_ms LIMIT $2${rowLocks ? ' FOR UPDATE SKIP LOCKED' : ''})`,
    // Served by the (state, created_at_ms) index.
    listInProgress:
      `SELECT "key", ${RECORD_COLUMNS}, {now} AS now_ms FROM ${table} ` +
      `WHERE state = '${IN_PROGRESS}' AND created_at_ms <= {now} - $1 AND expires_at_ms > {now} ORDER BY created_at_ms LIMIT $2`,
    forceDeleteInProgress:
      `DELETE FROM ${table} WHERE "key" = $1 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now} RETURNING "key"`,
    forceDeleteAny: `DELETE FROM ${table} WHERE "key" = $1 RETURNING "key"`,
  };
  const now = DATABASE_NOW_MS[dialect];
  return Object.fromEntries(
    Object.entries(statements).map(([name, sql]) => {
      const timed = sql.replaceAll('{now}', now);
      return [name, dialect === 'postgres' ? timed : timed.replace(/\$(\d+)/g, '?$1')];
    }),
  ) as unknown as Statements;
}

/**
 * A queue of exclusive sections: one section runs at a time, in call order. A call made from
 * inside a running section (same async context) runs at once, so work inside `transaction()`
 * may use the store. A section's context is closed when it ends: a timer it started that fires
 * later waits in line like everyone else.
 */
class ExclusiveQueue {
  private readonly section = new AsyncLocalStorage<{ open: boolean }>();
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(work: () => Promise<T>): Promise<T> {
    if (this.section.getStore()?.open) return work();
    const context = { open: true };
    const run = this.tail.then(() => this.section.run(context, work)).finally(() => {
      context.open = false;
    });
    this.tail = run.catch(() => undefined);
    return run;
  }
}

/**
 * The durable tier on TypeORM, over the application's own DataSource: PostgreSQL, or SQLite
 * through sql.js for the embedded mode. One row per scoped key in `idempotency_records`
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
 * - **Transactions** (`transaction()`): the row is locked (`SELECT ... FOR UPDATE` on
 *   PostgreSQL) and checked to be ours before `work` runs; the handler's writes and `complete`
 *   commit together. While the lock is held, `takeOver` waits at most `lockTimeoutMs` and then
 *   answers `existing`; `claim`, `get` and `deleteExpired` do not wait (they read the committed
 *   row, or skip it); the owner's `extend` (its heartbeat) runs inside the transaction.
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
  private readonly dialect: Dialect;
  private readonly lockTimeoutMs: number;
  private readonly exclusive: <T>(work: () => Promise<T>) => Promise<T>;
  /** Transactions opened by `transaction()` whose `work` has not settled yet, with their runner. */
  private readonly openTransactions = new WeakMap<DurableTransaction, QueryRunner>();
  /** The same runners by claim (`key`, owner token): the owner's heartbeat renews through them. */
  private readonly claimsInTransaction = new Map<string, QueryRunner>();
  /** Built on first use: on PostgreSQL the schema is known once the DataSource is connected. */
  private statements?: Statements;

  /**
   * @param dataSource the application's DataSource (`postgres` or `sqljs`). It may still be
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
    this.dialect = type === 'postgres' ? 'postgres' : 'sqlite';
    const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
    checkDuration('lockTimeoutMs', lockTimeoutMs);
    this.lockTimeoutMs = lockTimeoutMs;
    if (options.runExclusive !== undefined && typeof options.runExclusive !== 'function') {
      throw new TypeError('runExclusive must be a function');
    }
    if (this.dialect === 'postgres') {
      this.exclusive = (work) => work();
    } else if (options.runExclusive) {
      this.exclusive = options.runExclusive;
    } else {
      const queue = new ExclusiveQueue();
      this.exclusive = (work) => queue.run(work);
    }
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    checkKey(key);
    checkRequest(request);
    return this.operation('claim', (runner) => this.acquire(runner, key, request, undefined));
  }

  async takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest): Promise<ClaimResult> {
    checkKey(key);
    checkToken('expectedOwnerToken', expectedOwnerToken);
    checkRequest(request);
    return this.operation('takeOver', (runner) => this.acquire(runner, key, request, expectedOwnerToken));
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
    const params = [
      key,
      ownerToken,
      response.statusCode,
      JSON.stringify(response.headers),
      response.body === undefined ? null : response.body,
      this.boolean(response.bodyOmitted === true),
    ];
    if (transaction === undefined) {
      return this.operation('complete', async (runner) =>
        changedOne(await this.run(runner, this.sql.complete, params)),
      );
    }
    const runner = this.openTransactions.get(transaction);
    if (!runner) {
      throw new TypeError(
        'complete() was given a transaction that is not open: pass the one transaction() gave to its work, before work settles',
      );
    }
    try {
      return changedOne(await this.run(runner, this.sql.complete, params));
    } catch (error) {
      throw this.failure('complete', error);
    }
  }

  async release(key: string, ownerToken: string): Promise<boolean> {
    checkKey(key);
    checkToken('ownerToken', ownerToken);
    return this.operation('release', async (runner) =>
      changedOne(await this.run(runner, this.sql.release, [key, ownerToken])),
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
      changedOne(await this.run(runner, this.sql.extend, [key, ownerToken, leaseMs]));
    const held = this.claimsInTransaction.get(claimId(key, ownerToken));
    if (!held) return this.operation('extend', renew);
    try {
      return await renew(held);
    } catch (error) {
      throw this.failure('extend', error);
    }
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    checkKey(key);
    return this.operation('get', async (runner) => {
      const rows = (await this.run(runner, this.sql.selectLive, [key])).records;
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
  async transaction<T>(key: string, ownerToken: string, work: (transaction: DurableTransaction) => Promise<T>): Promise<T> {
    checkKey(key);
    checkToken('ownerToken', ownerToken);
    if (typeof work !== 'function') throw new TypeError('work must be a function');
    return this.exclusive(() => this.runTransaction(key, ownerToken, work));
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
    return this.operation('deleteExpired', async (runner) =>
      affectedRows(await this.run(runner, this.sql.deleteExpired, [nowMs ?? null, batchSize])),
    );
  }

  /** Oldest first, through the `(state, created_at_ms)` index. A row it cannot read is skipped (`get` of it says why). */
  override async listInProgress(olderThanMs: number, limit: number): Promise<InProgressEntry[]> {
    checkListArguments(olderThanMs, limit);
    return this.operation('listInProgress', async (runner) => {
      const rows = (await this.run(runner, this.sql.listInProgress, [olderThanMs, limit])).records as Row[];
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
    return this.operation('forceDelete', async (runner) => {
      const deleted =
        scope === 'any'
          ? await this.writeWaitingForLock(runner, this.sql.forceDeleteAny, [key])
          : await this.writeWaitingForLock(runner, this.sql.forceDeleteInProgress, [key]);
      if (deleted === 'locked') {
        throw new IdempotencyStoreError(
          `Durable idempotency store (${this.dialect}): forceDelete of ${key} waited ${this.lockTimeoutMs} ms for the ` +
            'row lock of a running transaction: its handler is still at work. Retry once it has finished.',
          'durable',
        );
      }
      return deleted.length === 1;
    });
  }

  /** `claim`, or with `expectedOwnerToken` `takeOver`: each attempt re-reads what it lost to. */
  private async acquire(
    runner: QueryRunner,
    key: string,
    request: ClaimRequest,
    expectedOwnerToken: string | undefined,
  ): Promise<ClaimResult> {
    for (let attempt = 1; attempt <= MAX_CLAIM_ATTEMPTS; attempt += 1) {
      if (expectedOwnerToken !== undefined) {
        const taken = await this.writeWaitingForLock(runner, this.sql.takeOver, [
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
      const inserted = (await this.run(runner, this.sql.insert, claimParams)).records;
      if (inserted.length > 0) return { kind: 'claimed', record: decodeRecord(single(inserted)) };
      const current = await this.read(runner, key);
      if (!current) continue;
      if (current.record.expiresAtMs > current.nowMs) return { kind: 'existing', ...current };
      const replaced = await this.writeWaitingForLock(runner, this.sql.replaceExpired, claimParams);
      // An expired row locked by a live transaction: its owner is still at work, as in takeOver.
      if (replaced === 'locked') return { kind: 'existing', ...current };
      if (replaced.length > 0) return { kind: 'claimed', record: decodeRecord(single(replaced)) };
    }
    throw new IdempotencyStoreError(
      `Durable idempotency store (${this.dialect}): a claim did not settle after ${MAX_CLAIM_ATTEMPTS} attempts ` +
        'because the row kept changing under it; retry the request.',
      'durable',
    );
  }

  /**
   * A guarded UPDATE that may meet the row lock of a live `transaction()`. On PostgreSQL it runs
   * in a short transaction whose `lock_timeout` is `lockTimeoutMs`, and answers 'locked' when the
   * lock is not granted in time; on SQLite there are no row locks to meet.
   */
  private async writeWaitingForLock(runner: QueryRunner, sql: string, params: unknown[]): Promise<Row[] | 'locked'> {
    if (this.dialect !== 'postgres') return (await this.run(runner, sql, params)).records;
    await runner.startTransaction();
    try {
      // SET takes no parameters; lockTimeoutMs is a validated integer.
      await runner.query(`SET LOCAL lock_timeout = '${this.lockTimeoutMs}ms'`);
      const rows = (await this.run(runner, sql, params)).records;
      await runner.commitTransaction();
      return rows;
    } catch (error) {
      await rollbackQuietly(runner);
      if (sqlState(error) === LOCK_NOT_AVAILABLE) return 'locked';
      throw error;
    }
  }

  /** The row as it is, expired or not, with the database's clock at the read. */
  private async read(runner: QueryRunner, key: string): Promise<{ record: IdempotencyRecord; nowMs: number } | undefined> {
    const rows = (await this.run(runner, this.sql.select, [key])).records;
    if (rows.length === 0) return undefined;
    const row = single(rows);
    return { record: decodeRecord(row), nowMs: integer(row, 'now_ms', 0) };
  }

  private async runTransaction<T>(
    key: string,
    ownerToken: string,
    work: (transaction: DurableTransaction) => Promise<T>,
  ): Promise<T> {
    const runner = this.connect('transaction');
    let result: T;
    try {
      try {
        await runner.startTransaction();
        const rows = (await this.run(runner, this.sql.lockOwned, [key, ownerToken])).records;
        if (rows.length === 0) throw new IdempotencyClaimLostError(key);
        decodeRecord(single(rows));
      } catch (error) {
        await rollbackQuietly(runner);
        throw this.failure('transaction', error);
      }
      const transaction: DurableTransaction = Object.freeze({ manager: runner.manager });
      const claim = claimId(key, ownerToken);
      this.openTransactions.set(transaction, runner);
      this.claimsInTransaction.set(claim, runner);
      try {
        result = await work(transaction);
      } catch (error) {
        this.openTransactions.delete(transaction);
        this.claimsInTransaction.delete(claim);
        await rollbackQuietly(runner);
        throw error;
      }
      this.openTransactions.delete(transaction);
      this.claimsInTransaction.delete(claim);
      try {
        await runner.commitTransaction();
      } catch (error) {
        await rollbackQuietly(runner);
        throw this.failure('transaction commit', error);
      }
    } catch (error) {
      await releaseQuietly(runner);
      throw error;
    }
    try {
      await runner.release();
    } catch (error) {
      throw this.failure('transaction commit', error);
    }
    return result;
  }

  /**
   * Runs one operation in the exclusive section (SQLite) on a query runner of its own (a pooled
   * connection on PostgreSQL), and turns every failure into an `IdempotencyStoreError`.
   */
  private operation<T>(name: string, work: (runner: QueryRunner) => Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      const runner = this.connect(name);
      let result: T;
      try {
        result = await work(runner);
      } catch (error) {
        await releaseQuietly(runner);
        throw this.failure(name, error);
      }
      try {
        // On sql.js, releasing is when a file-backed database is saved (autoSave).
        await runner.release();
      } catch (error) {
        throw this.failure(name, error);
      }
      return result;
    });
  }

  private connect(operation: string): QueryRunner {
    if (!this.dataSource.isInitialized) {
      throw new IdempotencyStoreError(
        `Durable idempotency store (${this.dialect}): ${operation} failed: the DataSource is not initialized ` +
          '(or was destroyed). Initialize it before the application serves requests.',
        'durable',
      );
    }
    try {
      return this.dataSource.createQueryRunner();
    } catch (error) {
      throw this.failure(operation, error);
    }
  }

  private get sql(): Statements {
    if (!this.statements) {
      const driver = this.dataSource.driver;
      const schema = this.dialect === 'postgres' ? driver.schema : undefined;
      const table = (schema ? [schema, IDEMPOTENCY_RECORDS_TABLE] : [IDEMPOTENCY_RECORDS_TABLE])
        .map((part) => driver.escape(part))
        .join('.');
      this.statements = statementsFor(this.dialect, table);
    }
    return this.statements;
  }

  private run(runner: QueryRunner, sql: string, params: unknown[]) {
    return runner.query(sql, params, true);
  }

  /** PostgreSQL binds a JS boolean; sql.js is given 0 / 1, which is what SQLite stores. */
  private boolean(value: boolean): boolean | number {
    return this.dialect === 'postgres' ? value : Number(value);
  }

  private failure(operation: string, error: unknown): Error {
    if (error instanceof IdempotencyStoreError || error instanceof IdempotencyClaimLostError) return error;
    const cause = error instanceof Error ? error.message : String(error);
    const missingTable =
      sqlState(error) === '42P01' || /no such table/i.test(cause)
        ? ' Is the table created? Add IDEMPOTENCY_TYPEORM_MIGRATIONS to the DataSource migrations and run them.'
        : '';
    return new IdempotencyStoreError(
      `Durable idempotency store (${this.dialect}): ${operation} failed: ${cause}.${missingTable} ` +
        'Make sure the database is reachable.',
      'durable',
      { cause: error },
    );
  }
}

function claimId(key: string, ownerToken: string): string {
  return `${key}\u0000${ownerToken}`;
}

function checkText(name: string, value: unknown): void {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string`);
  }
  if (value.length > MAX_TEXT_LENGTH) {
    throw new RangeError(`${name} must be at most ${MAX_TEXT_LENGTH} characters, got ${value.length}`);
  }
}

function checkKey(key: string): void {
  checkText('key (the scoped key id)', key);
}

function checkToken(name: string, token: string): void {
  checkText(name, token);
}

function checkRequest(request: ClaimRequest): void {
  checkClaimRequest(request);
  checkText('ownerToken', request.ownerToken);
  checkText('fingerprint', request.fingerprint);
}

function checkStoredResponse(response: StoredResponse): void {
  checkResponse(response);
  if (!isHeaders(response.headers)) {
    throw new TypeError('headers must be an object whose values are strings or arrays of strings');
  }
}

function isHeaders(value: unknown): value is Record<string, string | string[]> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  return Object.values(value).every(
    (v) => typeof v === 'string' || (Array.isArray(v) && v.every((item) => typeof item === 'string')),
  );
}

function single(rows: Row[]): Row {
  if (rows.length !== 1) throw unreadable(`a key matched ${rows.length} rows`);
  return rows[0];
}

/** True when the statement changed exactly one row (the key is the primary key: 0 or 1). */
function changedOne(result: { affected?: number }): boolean {
  const count = affectedRows(result);
  if (count > 1) throw unreadable(`a guarded write changed ${count} rows`);
  return count === 1;
}

function affectedRows(result: { affected?: number }): number {
  const count = result.affected;
  if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 0) {
    throw unreadable(`the driver reported ${String(count)} affected rows`);
  }
  return count;
}

function unreadable(detail: string): IdempotencyStoreError {
  return new IdempotencyStoreError(
    `Durable idempotency store: unreadable answer from the database (${detail}). The record is treated as ` +
      'unavailable: inspect the row in idempotency_records, repair or delete it.',
    'durable',
  );
}

function text(row: Row, column: string): string {
  const value = row[column];
  if (typeof value !== 'string' || value.length === 0) throw unreadable(`${column} is not a non-empty string`);
  return value;
}

/** `bigint` is a string on PostgreSQL and a number on SQLite; either must be a safe integer. */
function integer(row: Row, column: string, min: number): number {
  const value = row[column];
  const parsed = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
  if (typeof parsed !== 'number' || !Number.isSafeInteger(parsed) || parsed < min) {
    throw unreadable(`${column} is ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`);
  }
  return parsed;
}

/** PostgreSQL `boolean` is a JS boolean; SQLite stores 0 / 1. */
function flag(row: Row, column: string): boolean {
  const value = row[column];
  if (value === true || value === 1) return true;
  if (value === false || value === 0) return false;
  throw unreadable(`${column} is ${String(value)}`);
}

function decodeHeaders(row: Row): Record<string, string | string[]> {
  const value = row.response_headers;
  if (typeof value !== 'string') throw unreadable('response_headers is not text');
  let headers: unknown;
  try {
    headers = JSON.parse(value);
  } catch {
    throw unreadable('response_headers is not JSON');
  }
  if (!isHeaders(headers)) throw unreadable('response_headers is not an object of strings and string arrays');
  return headers;
}

function decodeBody(row: Row): Buffer | undefined {
  const value = row.response_body;
  if (value === null) return undefined;
  // node-postgres answers a Buffer, sql.js a Uint8Array: copy either into a Buffer of our own.
  if (value instanceof Uint8Array) return Buffer.from(value);
  throw unreadable('response_body is not bytes');
}

function isState(value: unknown): value is IdempotencyRecordState {
  return value === IN_PROGRESS || value === COMPLETED;
}

function decodeRecord(row: Row): IdempotencyRecord {
  const state = row.state;
  if (!isState(state)) throw unreadable(`state is ${JSON.stringify(state)}`);
  const record: IdempotencyRecord = {
    state,
    fingerprint: text(row, 'fingerprint'),
    ownerToken: text(row, 'owner_token'),
    fencingToken: integer(row, 'fencing_token', 1),
    createdAtMs: integer(row, 'created_at_ms', 0),
    leaseExpiresAtMs: integer(row, 'lease_expires_at_ms', 0),
    expiresAtMs: integer(row, 'expires_at_ms', 0),
  };
  const omitted = flag(row, 'response_body_omitted');
  if (state === IN_PROGRESS) {
    if (row.response_status !== null || row.response_headers !== null || row.response_body !== null || omitted) {
      throw unreadable('an in-progress row holds a response');
    }
    return record;
  }
  const statusCode = integer(row, 'response_status', 100);
  if (statusCode > 999) throw unreadable(`response_status is ${statusCode}`);
  const body = decodeBody(row);
  record.response = {
    statusCode,
    headers: decodeHeaders(row),
    ...(body !== undefined && { body }),
    ...(omitted && { bodyOmitted: true }),
  };
  return record;
}

/** The listing entry of a row (with the database's clock it was read by), or undefined when the row cannot be read. */
function readableEntry(row: Row): InProgressEntry | undefined {
  try {
    return { key: text(row, 'key'), record: decodeRecord(row), nowMs: integer(row, 'now_ms', 0) };
  } catch (error) {
    if (error instanceof IdempotencyStoreError) return undefined;
    throw error;
  }
}

function sqlState(error: unknown): string | undefined {
  const driverError = (error as { driverError?: { code?: unknown } } | null)?.driverError;
  const code = driverError?.code ?? (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

async function rollbackQuietly(runner: QueryRunner): Promise<void> {
  // The original error is the one worth reporting; a failed rollback on a broken connection is
  // discarded with that connection by the pool.
  if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
}

async function releaseQuietly(runner: QueryRunner): Promise<void> {
  await runner.release().catch(() => undefined);
}
