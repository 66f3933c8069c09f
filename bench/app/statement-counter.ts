import pg from 'pg';

let statements = 0;

/**
 * Counts every statement the process sends to PostgreSQL (BEGIN and COMMIT included), by
 * wrapping `pg.Client#query`, which the pool, TypeORM and the durable store all go through.
 */
export function countDatabaseStatements(): void {
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const query = prototype.query;
  prototype.query = function (this: unknown, ...args: unknown[]) {
    statements++;
    return query.apply(this, args);
  };
}

/** Statements sent since the process started. */
export function databaseStatementCount(): number {
  return statements;
}
