import mysql from 'mysql2';
import pg from 'pg';

let statements = 0;

/**
 * Counts every statement the process sends to PostgreSQL or MariaDB (BEGIN and COMMIT included),
 * by wrapping `pg.Client#query` and mysql2's `Connection#query`, which the pools, TypeORM and the
 * durable store all go through.
 */
export function countDatabaseStatements(): void {
  for (const prototype of [pg.Client.prototype, mysql.Connection.prototype] as unknown as {
    query: (...args: unknown[]) => unknown;
  }[]) {
    const query = prototype.query;
    prototype.query = function (this: unknown, ...args: unknown[]) {
      statements++;
      return query.apply(this, args);
    };
  }
}

/** Statements sent since the process started. */
export function databaseStatementCount(): number {
  return statements;
}
