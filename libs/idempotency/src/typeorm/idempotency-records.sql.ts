/**
 * The SQL of the TypeORM store for its two dialects, PostgreSQL and SQLite (sql.js): every
 * statement, clocked by the database, and the SQLSTATE codes the store reads from a failure
 * (@internal: not exported by the entry point).
 */
import type { IdempotencyRecordState } from '../interfaces/idempotency-record.interface.js';

/** PostgreSQL SQLSTATE `lock_not_available`, raised when `lock_timeout` elapses. */
export const LOCK_NOT_AVAILABLE = '55P03';
/**
 * PostgreSQL SQLSTATE `serialization_failure`: under REPEATABLE READ or SERIALIZABLE (a
 * DataSource `isolationLevel`), an INSERT that waited for another transaction's row of the key,
 * which then committed, cannot see it from its snapshot.
 */
export const SERIALIZATION_FAILURE = '40001';
/** PostgreSQL SQLSTATE `deadlock_detected`: like a serialization failure, the transaction was rolled back. */
export const DEADLOCK_DETECTED = '40P01';
/** PostgreSQL SQLSTATE `unique_violation`: `insertClaim` met a committed row of the key. */
export const UNIQUE_VIOLATION = '23505';
/**
 * PostgreSQL SQLSTATE `invalid_sql_statement_name`: a named prepared statement the connection's
 * client had prepared is gone from the server (`DISCARD ALL`, `DEALLOCATE`). @internal
 */
export const PREPARED_STATEMENT_MISSING = '26000';
/**
 * PostgreSQL SQLSTATE `duplicate_prepared_statement`: the client parsed a name the connection
 * already holds (a pooler gave it a server connection another client prepared on). @internal
 */
export const PREPARED_STATEMENT_EXISTS = '42P05';

/**
 * What `completeOrAbort` raises when it changes no row (a cast error, SQLSTATE 22P02, whose
 * message carries this text): the statement fails, so a COMMIT sent behind it rolls back. @internal
 */
const NOT_COMPLETED = 'idempotency record not completed: the claim no longer holds its row';

/** The custom setting `insertInTransaction` keeps the transaction's own `lock_timeout` in. @internal */
export const SAVED_LOCK_TIMEOUT = 'idempotency.saved_lock_timeout';

/** The record states as the `state` column holds them. @internal */
export const IN_PROGRESS: IdempotencyRecordState = 'in_progress';
export const COMPLETED: IdempotencyRecordState = 'completed';

/** Columns of a record, in the order every SELECT and RETURNING lists them. @internal */
export const RECORD_COLUMNS = [
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

/** MySQL and MariaDB share 'mysql' (idempotency-records.mysql.ts). @internal */
export type Dialect = 'postgres' | 'sqlite' | 'mysql';

/** The statements of one dialect, with the table's qualified name filled in. @internal */
export interface Statements {
  readonly insert: string;
  /**
   * `insert` as the first statement of a route's transaction. On PostgreSQL it also sets the
   * transaction's `lock_timeout` to the store's `lockTimeoutMs` before the row is inserted (the
   * source row is computed before the insert waits on another transaction's uncommitted row of
   * the key), saving the previous value in `idempotency.saved_lock_timeout`; `restoreLockTimeout`
   * puts it back before the handler runs. One round trip instead of three.
   */
  readonly insertInTransaction: string;
  /**
   * PostgreSQL: `insertInTransaction` without `ON CONFLICT`, returning the row's `ctid` too, tried
   * first. The unique check of a plain INSERT takes no SSI predicate lock on the key's index page
   * (`ON CONFLICT` reads the index, and that read conflicts with other keys' inserts on the same
   * page under SERIALIZABLE); a `unique_violation` means the key has a committed row, and the
   * claim starts again with `insertInTransaction`. It puts the transaction's `lock_timeout` back
   * once the row is in (`restoreLockTimeout`, folded in): the handler never runs under the
   * claim's. Empty on SQLite.
   */
  readonly insertClaim: string;
  /**
   * PostgreSQL: `complete` of the row `insertClaim` inserted, found by its `ctid` ($7): a TID scan
   * locks that tuple only, where the scan of the key's index would lock the index page. Empty on SQLite.
   */
  readonly completeInserted: string;
  /**
   * PostgreSQL: `complete` (and `completeInserted`) as a statement that fails when it changes no
   * row, sent with the COMMIT behind it (`DurableTransactionOptions.commitOnComplete`): the
   * business writes then never commit without their completed record. See `isNotCompleted`.
   */
  readonly completeOrAbort: string;
  readonly completeInsertedOrAbort: string;
  /** Restores the `lock_timeout` `insertInTransaction` saved (PostgreSQL; nothing on SQLite). Parameterless. */
  readonly restoreLockTimeout: string;
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
const DATABASE_NOW_MS: Record<Exclude<Dialect, 'mysql'>, string> = {
  postgres: '(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint',
  sqlite: "CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)",
};

/**
 * Writes the statements once, with PostgreSQL's `$n` placeholders and `{now}` for the database's
 * clock; for SQLite the placeholders become `?n` (numbered, so a parameter used twice or out of
 * order binds the same value on both). Every time comparison and every time written is `{now}`
 * (plus a duration); a statement whose caller needs the clock it decided by returns it as `now_ms`.
 */
export function statementsFor(dialect: Exclude<Dialect, 'mysql'>, table: string, lockTimeoutMs = 0): Statements {
  const rowLocks = dialect === 'postgres';
  if (!Number.isSafeInteger(lockTimeoutMs) || lockTimeoutMs < 0)
    throw new RangeError('lockTimeoutMs must be an integer');
  const insertColumns =
    `INSERT INTO ${table} ("key", state, fingerprint, owner_token, fencing_token, created_at_ms, ` +
    'lease_expires_at_ms, expires_at_ms, response_status, response_headers, response_body, response_body_omitted) ';
  const insert =
    insertColumns +
    `VALUES ($1, '${IN_PROGRESS}', $2, $3, 1, {now}, {now} + $4, {now} + $5, NULL, NULL, NULL, FALSE) ` +
    `ON CONFLICT ("key") DO NOTHING RETURNING ${RECORD_COLUMNS}`;
  const complete =
    `UPDATE ${table} SET state = '${COMPLETED}', response_status = $3, response_headers = $4, ` +
    'response_body = $5, response_body_omitted = $6 ' +
    `WHERE "key" = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`;
  const statements: Statements = {
    insertInTransaction: rowLocks
      ? insertColumns +
        // set_config() is volatile: evaluated once, for the one source row, before the insert.
        // The inner call saves the transaction's lock_timeout before the outer one replaces it.
        `SELECT $1, '${IN_PROGRESS}', $2, $3, 1, {now}, {now} + CAST($4 AS BIGINT), {now} + CAST($5 AS BIGINT), ` +
        `NULL, NULL, NULL, FALSE FROM (SELECT set_config('lock_timeout', ` +
        `'${lockTimeoutMs}ms' || left(set_config('${SAVED_LOCK_TIMEOUT}', current_setting('lock_timeout'), true), 0), true) ` +
        'AS lock_timeout) AS idempotency_lock WHERE idempotency_lock.lock_timeout IS NOT NULL ' +
        `ON CONFLICT ("key") DO NOTHING RETURNING ${RECORD_COLUMNS}`
      : insert,
    insertClaim: '',
    completeOrAbort: '',
    completeInsertedOrAbort: '',
    restoreLockTimeout: rowLocks
      ? `SELECT set_config('lock_timeout', current_setting('${SAVED_LOCK_TIMEOUT}'), true)`
      : '',
    insert,
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
    complete,
    completeInserted: rowLocks ? `${complete} AND ctid = CAST($7 AS tid)` : '',
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
    forceDeleteInProgress: `DELETE FROM ${table} WHERE "key" = $1 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now} RETURNING "key"`,
    forceDeleteAny: `DELETE FROM ${table} WHERE "key" = $1 RETURNING "key"`,
  };
  // The outer SELECT runs once the INSERT has produced its row (after any wait for the key), so
  // the restore never shortens that wait; without a row (an error) the rollback restores it.
  const insertClaim = rowLocks
    ? 'WITH claimed AS (' +
      statements.insertInTransaction
        .replace(' ON CONFLICT ("key") DO NOTHING', '')
        .replace(`RETURNING ${RECORD_COLUMNS}`, `RETURNING ${RECORD_COLUMNS}, ctid::text AS row_ctid`) +
      `) SELECT claimed.*, ${statements.restoreLockTimeout.replace('SELECT ', '')} AS lock_timeout FROM claimed`
    : '';
  const orAbort = (update: string) =>
    rowLocks
      ? `WITH completed AS (${update} RETURNING 1) SELECT CAST(CASE WHEN count(*) = 1 THEN '1' ` +
        `ELSE '${NOT_COMPLETED}' END AS integer) AS completed FROM completed`
      : '';
  const completeOrAbort = orAbort(statements.complete);
  const completeInsertedOrAbort = orAbort(statements.completeInserted);
  const now = DATABASE_NOW_MS[dialect];
  return Object.fromEntries(
    Object.entries({ ...statements, insertClaim, completeOrAbort, completeInsertedOrAbort }).map(([name, sql]) => {
      const timed = sql.replaceAll('{now}', now);
      return [name, dialect === 'postgres' ? timed : timed.replace(/\$(\d+)/g, '?$1')];
    }),
  ) as unknown as Statements;
}

/** `completeOrAbort` changed no row: the claim's row is not the claim's any more (or has expired). @internal */
export function isNotCompleted(error: unknown): boolean {
  return sqlState(error) === '22P02' && error instanceof Error && error.message.includes(NOT_COMPLETED);
}

/**
 * `error` is PostgreSQL's answer (an ErrorResponse: node-postgres' DatabaseError, with its
 * severity), not a failure of the socket, whose `code` (ECONNRESET, EPIPE) is no SQLSTATE. @internal
 */
export function answeredByServer(error: unknown): boolean {
  return sqlState(error) !== undefined && typeof (error as { severity?: unknown } | null)?.severity === 'string';
}

/** The SQLSTATE of a driver error (PostgreSQL), if it has one. @internal */
export function sqlState(error: unknown): string | undefined {
  const driverError = (error as { driverError?: { code?: unknown } } | null)?.driverError;
  const code = driverError?.code ?? (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * A serialization failure or deadlock, on `error` or one of its causes (a store error wraps the
 * driver's): PostgreSQL rolled the transaction back, whatever statement (the COMMIT included)
 * raised it. @internal
 */
export function isSerializationFailure(error: unknown): boolean {
  for (let current = error, depth = 0; current !== undefined && current !== null && depth < 5; depth += 1) {
    const state = sqlState(current);
    if (state === SERIALIZATION_FAILURE || state === DEADLOCK_DETECTED) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}
