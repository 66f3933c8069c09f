/**
 * The SQL of the TypeORM store on MySQL 8 and MariaDB 10.11+ (the `mysql2` driver), and the
 * error numbers it reads (@internal: not exported by the entry point). Only SQL both servers
 * accept: no `RETURNING` (MariaDB has it, MySQL 8 does not), no `INSERT ... ON DUPLICATE KEY`
 * (it takes an exclusive lock on the existing row, and next-key locks under REPEATABLE READ),
 * no `FOR SHARE` (MySQL 8 only: `LOCK IN SHARE MODE` is the spelling both know).
 */
import type { Statements } from './idempotency-records.sql.js';
import { COMPLETED, IN_PROGRESS, RECORD_COLUMNS } from './idempotency-records.sql.js';

/** `ER_DUP_ENTRY`: the INSERT met a row of the key (committed, or one it waited for and that committed). */
export const MYSQL_DUPLICATE_KEY = 1062;
/** `ER_LOCK_WAIT_TIMEOUT`: `innodb_lock_wait_timeout` elapsed; MariaDB also answers `NOWAIT` with it. Only the statement is rolled back. */
export const MYSQL_LOCK_WAIT_TIMEOUT = 1205;
/** `ER_LOCK_DEADLOCK`: InnoDB chose this transaction as a deadlock's victim and rolled ALL of it back. */
export const MYSQL_DEADLOCK = 1213;
/** `ER_LOCK_NOWAIT` (MySQL 8): `FOR UPDATE NOWAIT` met a locked row. */
export const MYSQL_LOCK_NOWAIT = 3572;
/** `ER_NO_SUCH_TABLE`. */
export const MYSQL_NO_SUCH_TABLE = 1146;

/** The user variable `saveAndSetLockWait` keeps the session's own `innodb_lock_wait_timeout` in. */
const SAVED_LOCK_WAIT = '@idempotency_saved_lock_wait';

/**
 * The database's clock in epoch ms: `UTC_TIMESTAMP(6)` is fixed for the statement (as PostgreSQL's
 * `statement_timestamp()`), and the difference is taken in UTC, so neither the session's
 * `time_zone` nor a daylight-saving change moves it (`UNIX_TIMESTAMP(NOW(3))` converts from the
 * session's zone and is ambiguous for an hour a year).
 */
const MYSQL_NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";
/**
 * MySQL's own statements, beside the ones it shares with the other dialects' `Statements`.
 * Placeholders are written `$n` as everywhere in the store; {@link positional} turns them into
 * mysql2's `?` when a statement runs.
 */
export interface MysqlStatements {
  /** Plain INSERT of a new claim: a row of the key, committed or not, makes it fail with 1062 (after waiting for an uncommitted one). */
  readonly insert: string;
  /** The row of the key with the database's clock, and one row even when the key has none. */
  readonly readWithClock: string;
  /**
   * The new claim of `ownerToken` ($2) stamped again with the clock after its INSERT, whose clock
   * was read when it started, before it waited for another transaction's uncommitted row of the key.
   */
  readonly restamp: string;
  /** The row as a claim of `ownerToken` ($2) wrote it, read right after the write (MySQL has no RETURNING). */
  readonly selectOwned: string;
  /** The row of the key with the clock, under a shared lock (the one the duplicate check already holds), read after a 1062 in a transaction. */
  readonly selectShared: string;
  readonly replaceExpired: string;
  readonly takeOver: string;
  /** Takes the row's exclusive lock, or fails at once (1205 on MariaDB, 3572 on MySQL 8): polled up to `lockTimeoutMs`. */
  readonly lockRowNowait: string;
  /** The keys of up to $2 expired rows that no transaction holds (`SKIP LOCKED`, MySQL 8.0.1+ / MariaDB 10.6+). */
  readonly lockExpired: string;
  readonly forceDeleteInProgress: string;
  readonly forceDeleteAny: string;
  /** Saves the session's `innodb_lock_wait_timeout` and sets the claim's (whole seconds), in one statement. */
  readonly saveAndSetLockWait: string;
  /** Puts the saved `innodb_lock_wait_timeout` back. */
  readonly restoreLockWait: string;
  /** `DELETE` of the keys `lockExpired` locked, still expired ($1 as there); $2... are the keys. */
  deleteLocked(count: number): string;
}

/**
 * The statements on `table` (already escaped by the driver). `lockTimeoutMs` becomes whole seconds
 * for the claims' INSERTs, rounded up (MySQL's `innodb_lock_wait_timeout` counts
 * seconds, at least 1); the other lock waits poll `NOWAIT` and keep millisecond precision.
 */
export function mysqlStatementsFor(table: string, lockTimeoutMs: number): Statements & { mysql: MysqlStatements } {
  const key = '`key`';
  const now = (sql: string) => sql.replaceAll('{now}', MYSQL_NOW_MS);
  const insertColumns =
    `INSERT INTO ${table} (${key}, state, fingerprint, owner_token, fencing_token, created_at_ms, ` +
    'lease_expires_at_ms, expires_at_ms, response_status, response_headers, response_body, response_body_omitted) ';
  const select = `SELECT ${RECORD_COLUMNS}, {now} AS now_ms FROM ${table} WHERE ${key} = $1`;
  const shared = {
    select,
    selectLive: `SELECT ${RECORD_COLUMNS} FROM ${table} WHERE ${key} = $1 AND expires_at_ms > {now}`,
    lockOwned:
      `SELECT ${RECORD_COLUMNS} FROM ${table} ` +
      `WHERE ${key} = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now} FOR UPDATE`,
    complete:
      `UPDATE ${table} SET state = '${COMPLETED}', response_status = $3, response_headers = $4, ` +
      'response_body = $5, response_body_omitted = $6 ' +
      `WHERE ${key} = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    release:
      `DELETE FROM ${table} ` +
      `WHERE ${key} = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    // MySQL assigns left to right: expires_at_ms is compared before it is written.
    extend:
      `UPDATE ${table} SET lease_expires_at_ms = {now} + $3, ` +
      'expires_at_ms = CASE WHEN expires_at_ms < {now} + $3 THEN {now} + $3 ELSE expires_at_ms END ' +
      `WHERE ${key} = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    listInProgress:
      `SELECT ${key}, ${RECORD_COLUMNS}, {now} AS now_ms FROM ${table} ` +
      `WHERE state = '${IN_PROGRESS}' AND created_at_ms <= {now} - $1 AND expires_at_ms > {now} ORDER BY created_at_ms LIMIT $2`,
  };
  const expired = `expires_at_ms <= COALESCE(CAST($1 AS SIGNED), {now})`;
  const mysql: MysqlStatements = {
    insert: now(
      insertColumns +
        `VALUES ($1, '${IN_PROGRESS}', $2, $3, 1, {now}, {now} + $4, {now} + $5, NULL, NULL, NULL, FALSE)`,
    ),
    readWithClock: now(
      `SELECT ${RECORD_COLUMNS.split(', ')
        .map((column) => `r.${column}`)
        .join(', ')}, {now} AS now_ms FROM (SELECT 1 AS one) AS clock LEFT JOIN ${table} AS r ON r.${key} = $1`,
    ),
    restamp: now(
      `UPDATE ${table} SET created_at_ms = {now}, lease_expires_at_ms = {now} + $3, expires_at_ms = {now} + $4 ` +
        `WHERE ${key} = $1 AND owner_token = $2 AND fencing_token = 1 AND state = '${IN_PROGRESS}'`,
    ),
    selectOwned: `SELECT ${RECORD_COLUMNS} FROM ${table} WHERE ${key} = $1 AND owner_token = $2`,
    selectShared: now(`${select} LOCK IN SHARE MODE`),
    replaceExpired: now(
      `UPDATE ${table} SET state = '${IN_PROGRESS}', fingerprint = $2, owner_token = $3, ` +
        'fencing_token = fencing_token + 1, created_at_ms = {now}, lease_expires_at_ms = {now} + $4, expires_at_ms = {now} + $5, ' +
        'response_status = NULL, response_headers = NULL, response_body = NULL, response_body_omitted = FALSE ' +
        `WHERE ${key} = $1 AND expires_at_ms <= {now}`,
    ),
    takeOver: now(
      `UPDATE ${table} SET owner_token = $3, fingerprint = $4, fencing_token = fencing_token + 1, ` +
        'lease_expires_at_ms = {now} + $5, expires_at_ms = {now} + $6 ' +
        `WHERE ${key} = $1 AND owner_token = $2 AND state = '${IN_PROGRESS}' ` +
        'AND lease_expires_at_ms <= {now} AND expires_at_ms > {now}',
    ),
    lockRowNowait: `SELECT ${key} FROM ${table} WHERE ${key} = $1 FOR UPDATE NOWAIT`,
    lockExpired: now(
      `SELECT ${key} FROM ${table} WHERE ${expired} ORDER BY expires_at_ms LIMIT $2 FOR UPDATE SKIP LOCKED`,
    ),
    forceDeleteInProgress: now(
      `DELETE FROM ${table} WHERE ${key} = $1 AND state = '${IN_PROGRESS}' AND expires_at_ms > {now}`,
    ),
    forceDeleteAny: `DELETE FROM ${table} WHERE ${key} = $1`,
    // SET takes no placeholders; the seconds are computed from a validated integer.
    saveAndSetLockWait: `SET ${SAVED_LOCK_WAIT} = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = ${Math.max(1, Math.ceil(lockTimeoutMs / 1000))}`,
    restoreLockWait: `SET SESSION innodb_lock_wait_timeout = ${SAVED_LOCK_WAIT}`,
    deleteLocked: (count) =>
      now(
        `DELETE FROM ${table} WHERE ${key} IN (${Array.from({ length: count }, (_, i) => `$${i + 2}`).join(', ')}) AND ${expired}`,
      ),
  };
  // The statements only the other dialects run (their RETURNING forms, PostgreSQL's claim) are
  // empty here: the MySQL code paths use `mysql` instead.
  return {
    ...(Object.fromEntries(Object.entries(shared).map(([name, sql]) => [name, now(sql)])) as typeof shared),
    insert: '',
    insertInTransaction: '',
    insertClaim: '',
    completeInserted: '',
    completeOrAbort: '',
    completeInsertedOrAbort: '',
    restoreLockTimeout: '',
    replaceExpired: '',
    takeOver: '',
    deleteExpired: '',
    forceDeleteInProgress: '',
    forceDeleteAny: '',
    mysql,
  };
}

const positionalCache = new Map<string, { sql: string; order: number[] }>();

/**
 * mysql2 binds `?` in order of appearance; the store writes `$n`, which may repeat or come out of
 * order. Returns the statement with `?` and the parameters in the order its `?` consume them.
 */
export function positional(sql: string, params: unknown[]): [string, unknown[]] {
  let converted = positionalCache.get(sql);
  if (!converted) {
    const order: number[] = [];
    const text = sql.replace(/\$(\d+)/g, (_, n: string) => {
      order.push(Number(n) - 1);
      return '?';
    });
    converted = { sql: text, order };
    // Statements are a fixed set per table, plus deleteLocked per batch size: the cache stays small.
    if (positionalCache.size < 1_000) positionalCache.set(sql, converted);
  }
  return [converted.sql, converted.order.map((index) => params[index])];
}

/** The server's error number of a driver error (`errno`), on the error or the `driverError` TypeORM wraps it in. */
export function mysqlErrno(error: unknown): number | undefined {
  const driverError = (error as { driverError?: { errno?: unknown } } | null)?.driverError;
  const errno = driverError?.errno ?? (error as { errno?: unknown } | null)?.errno;
  return typeof errno === 'number' ? errno : undefined;
}

/** A lock not granted in time: the wait elapsed (1205), or `NOWAIT` found the row locked (1205 on MariaDB, 3572 on MySQL 8). */
export function isMysqlLockNotAvailable(error: unknown): boolean {
  const errno = mysqlErrno(error);
  return errno === MYSQL_LOCK_WAIT_TIMEOUT || errno === MYSQL_LOCK_NOWAIT;
}

/** A deadlock (1213), on `error` or one of its causes: InnoDB rolled the whole transaction back. */
export function isMysqlDeadlock(error: unknown): boolean {
  for (let current = error, depth = 0; current !== undefined && current !== null && depth < 5; depth += 1) {
    if (mysqlErrno(current) === MYSQL_DEADLOCK) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}
