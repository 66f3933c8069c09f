import mysql from 'mysql2';
import pg from 'pg';

let statements = 0;
let roundTrips = 0;

/**
 * Counts every statement the process sends to PostgreSQL or MariaDB (BEGIN and COMMIT included),
 * by wrapping `pg.Client#query` and mysql2's `Connection#query`, which the pools, TypeORM and the
 * durable store all go through, and the round trips among them: a statement sent while its
 * connection has none in flight starts one; one sent behind another still unanswered
 * (node-postgres' pipeline mode) joins it. mysql2 does not pipeline: each statement is a trip.
 */
export function countDatabaseStatements(): void {
  type Queryable = { query: (...args: unknown[]) => unknown };
  const pgPrototype = pg.Client.prototype as unknown as Queryable;
  const pgQuery = pgPrototype.query;
  pgPrototype.query = function (this: unknown, ...args: unknown[]) {
    statements++;
    // node-postgres' Client keeps the statement it awaits the answer of in `_activeQuery`.
    if (!(this as { _activeQuery?: unknown })._activeQuery) roundTrips++;
    return pgQuery.apply(this, args);
  };
  const mysqlPrototype = mysql.Connection.prototype as unknown as Queryable;
  const mysqlQuery = mysqlPrototype.query;
  mysqlPrototype.query = function (this: unknown, ...args: unknown[]) {
    statements++;
    roundTrips++;
    return mysqlQuery.apply(this, args);
  };
}

/** Statements sent since the process started. */
export function databaseStatementCount(): number {
  return statements;
}

/** Round trips to PostgreSQL or MariaDB since the process started. */
export function databaseRoundTripCount(): number {
  return roundTrips;
}
