/**
 * The TypeORM store's DataSource handling: each operation on a query runner of its own (a pooled
 * connection on PostgreSQL) inside the exclusive section (sql.js), the transactions
 * `transaction()` opens, guarded writes that wait for a row lock at most `lockTimeoutMs`, and the
 * `IdempotencyStoreError` a failure becomes. Claims in a transaction: claim-transactions.ts.
 */
import { createHash } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type {
  DurableTransaction,
  DurableTransactionOptions,
  TransactionalClaimResult,
} from '../stores/durable-idempotency-store.js';
import type { ClaimRequest } from '../stores/idempotency-store.js';
import { ClaimTransactions } from './claim-transactions.js';
import { decodeRecord, single, type Row } from './idempotency-record.codec.js';
import { IDEMPOTENCY_RECORDS_TABLE } from './idempotency-record.entity.js';
import {
  isMysqlDeadlock,
  mysqlStatementsFor,
  MYSQL_NO_SUCH_TABLE,
  mysqlErrno,
  positional,
  type MysqlStatements,
} from './idempotency-records.mysql.js';
import {
  LOCK_NOT_AVAILABLE,
  PREPARED_STATEMENT_EXISTS,
  PREPARED_STATEMENT_MISSING,
  sqlState,
  statementsFor,
  type Dialect,
  type Statements,
} from './idempotency-records.sql.js';
import { MysqlRecords } from './mysql-records.js';
import {
  HANDLER_SAVEPOINT,
  OpenTransactions,
  releaseQuietly,
  rollbackQuietly,
  UNDO_HANDLER_WRITES,
} from './query-runners.js';
import { partitionedNames, partitionedStatementsFor, type PartitionedNames } from './partitioned-records.sql.js';
import type { RouteTransactions } from './route-transactions.js';
import type { RunExclusive } from './sqljs-exclusive-queue.js';

/** How often an autocommit statement on MySQL that lost a deadlock runs, in all. */
const MYSQL_DEADLOCK_ATTEMPTS = 5;

/** @internal */
export class IdempotencyRecordsConnection {
  /** Transactions opened by `transaction()` or a claim whose work has not settled yet, with their runner. */
  readonly openTransactions = new OpenTransactions();
  private readonly claims = new ClaimTransactions(this);
  /** The writes MySQL and MariaDB make their own way (no RETURNING there). */
  readonly mysql = new MysqlRecords(this);
  /** Built on first use: on PostgreSQL the schema is known once the DataSource is connected. */
  private statements?: Statements;
  /** MySQL's own statements (no RETURNING there), built with `statements`. */
  private mysqlStatements?: MysqlStatements;
  private readonly preparedNames = new Map<string, string>();

  constructor(
    private readonly dataSource: DataSource,
    readonly dialect: Dialect,
    readonly lockTimeoutMs: number,
    readonly exclusive: RunExclusive,
    readonly routes: RouteTransactions,
    /** `TypeOrmIdempotencyStoreOptions.preparedStatements`. */
    private readonly preparedStatements = true,
    /** The table is the partitioned one (`partitioning` option): its claim calls the claim function. */
    readonly partitioned = false,
  ) {}

  /**
   * PostgreSQL: the name `sql` is prepared under on each connection, or undefined when prepared
   * statements are off. Derived from the text, so that stores sharing a pool (other schemas)
   * never give one name two texts.
   */
  preparedName(sql: string): string | undefined {
    if (!this.preparedStatements) return undefined;
    let name = this.preparedNames.get(sql);
    if (name === undefined) {
      name = `idempotency_${createHash('sha256').update(sql).digest('hex').slice(0, 32)}`;
      this.preparedNames.set(sql, name);
    }
    return name;
  }

  /** The partitioned table's names, quoted and qualified as the DataSource's schema asks. */
  partitionedNames(): PartitionedNames {
    return partitionedNames(this.dataSource.driver);
  }

  /** Runs `work` in a transaction that holds the row of the claim (see `TypeOrmIdempotencyStore.transaction`). */
  transaction<T>(
    key: string,
    ownerToken: string,
    work: (transaction: DurableTransaction) => Promise<T>,
    options: DurableTransactionOptions,
  ): Promise<T> {
    return this.exclusive(() => this.runTransaction(key, ownerToken, work, options));
  }

  /** `TypeOrmIdempotencyStore.claimInTransaction`: see claim-transactions.ts. */
  claimInTransaction(
    key: string,
    request: ClaimRequest,
    completion: (response: StoredResponse) => unknown[],
    options: DurableTransactionOptions,
  ): Promise<TransactionalClaimResult> {
    return this.claims.open(key, request, completion, options);
  }

  /**
   * BEGIN at the route's isolation level (PostgreSQL, MySQL; SQLite's transactions on its one
   * connection are serializable whatever is asked), and the guard against a stronger level asked inside.
   */
  async begin(runner: QueryRunner, options: DurableTransactionOptions): Promise<void> {
    if (this.dialect === 'sqlite') return runner.startTransaction();
    await runner.startTransaction(options.isolationLevel);
    this.routes.guardIsolation(runner, options);
  }

  /** The level a route's transaction BEGINs at: the route's, else the DataSource's (as `startTransaction` picks it). */
  isolationLevel(options: DurableTransactionOptions): string | undefined {
    return options.isolationLevel ?? this.dataSource.options.isolationLevel;
  }

  /** The runner of a transaction whose `work` is still running, or undefined. */
  runnerOf(transaction: DurableTransaction): QueryRunner | undefined {
    return this.openTransactions.runnerOf(transaction);
  }

  /** The runner of the owner's open `transaction()` on this claim, or undefined. */
  runnerHolding(key: string, ownerToken: string): QueryRunner | undefined {
    return this.openTransactions.runnerHolding(key, ownerToken);
  }

  /**
   * Runs one operation in the exclusive section (SQLite) on a query runner of its own (a pooled
   * connection on PostgreSQL), and turns every failure into an `IdempotencyStoreError`.
   */
  operation<T>(name: string, work: (runner: QueryRunner) => Promise<T>): Promise<T> {
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

  get sql(): Statements {
    if (!this.statements) {
      const driver = this.dataSource.driver;
      const schema = this.dialect === 'postgres' ? driver.schema : undefined;
      const table = (schema ? [schema, IDEMPOTENCY_RECORDS_TABLE] : [IDEMPOTENCY_RECORDS_TABLE])
        .map((part) => driver.escape(part))
        .join('.');
      if (this.dialect === 'mysql') {
        const { mysql, ...statements } = mysqlStatementsFor(table, this.lockTimeoutMs);
        this.mysqlStatements = mysql;
        this.statements = statements;
      } else {
        this.statements = this.partitioned
          ? partitionedStatementsFor(this.partitionedNames(), this.lockTimeoutMs)
          : statementsFor(this.dialect, table, this.lockTimeoutMs);
      }
    }
    return this.statements;
  }

  /** MySQL's own statements (only on a MySQL or MariaDB DataSource). */
  get mysqlSql(): MysqlStatements {
    if (!this.sql || !this.mysqlStatements) throw new Error(`no MySQL statements on ${this.dialect}`);
    return this.mysqlStatements;
  }

  async run(runner: QueryRunner, sql: string, params: unknown[]) {
    if (this.dialect !== 'mysql') return runner.query(sql, params, true);
    const [text, values] = positional(sql, params);
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await runner.query(text, values, true);
      } catch (error) {
        // In autocommit, a deadlock's victim is this one statement, rolled back whole (InnoDB can
        // lock a row and its index entries in opposite orders, e.g. a completion against a
        // takeover): nothing changed, so it runs again.
        if (runner.isTransactionActive || !isMysqlDeadlock(error) || attempt === MYSQL_DEADLOCK_ATTEMPTS) throw error;
      }
    }
  }

  /** PostgreSQL binds a JS boolean; sql.js and MySQL are given 0 / 1, which is what they store. */
  boolean(value: boolean): boolean | number {
    return this.dialect === 'postgres' ? value : Number(value);
  }

  failure(operation: string, error: unknown): Error {
    if (error instanceof IdempotencyStoreError || error instanceof IdempotencyClaimLostError) return error;
    const cause = error instanceof Error ? error.message : String(error);
    const missingTable =
      sqlState(error) === '42P01' || mysqlErrno(error) === MYSQL_NO_SUCH_TABLE || /no such table/i.test(cause)
        ? ' Is the table created? Add IDEMPOTENCY_TYPEORM_MIGRATIONS to the DataSource migrations and run them.'
        : optionMismatch(sqlState(error), this.partitioned);
    return new IdempotencyStoreError(
      `Durable idempotency store (${this.dialect}): ${operation} failed: ${cause}.${missingTable} ` +
        'Make sure the database is reachable.',
      'durable',
      { cause: error },
    );
  }

  /**
   * A guarded UPDATE that may meet the row lock of a live `transaction()`. On PostgreSQL it runs
   * in a short transaction whose `lock_timeout` is `lockTimeoutMs`, and answers 'locked' when the
   * lock is not granted in time; on SQLite there are no row locks to meet.
   */
  async writeWaitingForLock(runner: QueryRunner, sql: string, params: unknown[]): Promise<Row[] | 'locked'> {
    if (this.dialect === 'sqlite') return (await this.run(runner, sql, params)).records;
    if (this.dialect === 'mysql') throw new Error('writeWaitingForLock: MySQL writes go through MysqlRecords');
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

  private async runTransaction<T>(
    key: string,
    ownerToken: string,
    work: (transaction: DurableTransaction) => Promise<T>,
    options: DurableTransactionOptions,
  ): Promise<T> {
    const runner = this.connect('transaction');
    let result: T;
    try {
      try {
        await this.begin(runner, options);
        const rows = (await this.run(runner, this.sql.lockOwned, [key, ownerToken])).records;
        if (rows.length === 0) throw new IdempotencyClaimLostError(key);
        decodeRecord(single(rows));
      } catch (error) {
        await rollbackQuietly(runner);
        throw this.failure('transaction', error);
      }
      const transaction: DurableTransaction = Object.freeze({
        manager: runner.manager,
        savepoint: async () => {
          await this.run(runner, HANDLER_SAVEPOINT, []);
          return async () => void (await this.run(runner, UNDO_HANDLER_WRITES, []));
        },
      });
      this.openTransactions.add(transaction, key, ownerToken, runner);
      try {
        result = await this.routes.run(runner, options, () => work(transaction));
      } catch (error) {
        this.openTransactions.remove(transaction, key, ownerToken);
        await rollbackQuietly(runner);
        throw error;
      }
      this.openTransactions.remove(transaction, key, ownerToken);
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

  connect(operation: string): QueryRunner {
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
}

/**
 * The hint for a store whose options do not match what it runs on: the `partitioning` option not
 * the table the migrations made (the claim function is missing, 42883, or `ON CONFLICT ("key")`
 * finds no unique index on a partitioned table, 42P10), or `preparedStatements` behind a pooler
 * that does not keep them (a connection's statements are not what the client believes: 26000, 42P05).
 */
function optionMismatch(state: string | undefined, partitioned: boolean): string {
  if (partitioned && state === '42883') {
    return ' The partitioning option needs the partitioned table: run IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS.';
  }
  if (!partitioned && state === '42P10') {
    return ' The table is the partitioned one: give the store its partitioning option.';
  }
  if (state === PREPARED_STATEMENT_MISSING || state === PREPARED_STATEMENT_EXISTS) {
    return (
      " The connection's prepared statements changed under the store: behind a pooler in transaction mode that " +
      'does not keep them, give the store preparedStatements: false.'
    );
  }
  return '';
}
