import pg from 'pg';

let statements = 0;
let roundTrips = 0;

/**
 * Counts every statement the process sends to PostgreSQL (BEGIN and COMMIT included), by
 * wrapping `pg.Client#query`, which the pool, TypeORM and the durable store all go through, and
 * the round trips among them: a statement sent while its connection has none in flight starts
 * one; one sent behind another still unanswered (node-postgres' pipeline mode) joins it.
 */
export function countDatabaseStatements(): void {
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const query = prototype.query;
  prototype.query = function (this: unknown, ...args: unknown[]) {
    statements++;
    // node-postgres' Client keeps the statement it awaits the answer of in `_activeQuery`.
    if (!(this as { _activeQuery?: unknown })._activeQuery) roundTrips++;
    return query.apply(this, args);
  };
}

/** Statements sent since the process started. */
export function databaseStatementCount(): number {
  return statements;
}

/** Round trips to PostgreSQL since the process started. */
export function databaseRoundTripCount(): number {
  return roundTrips;
}
