/**
 * The TypeORM store's DataSource and transaction handling: each operation on a query runner of
 * its own (a pooled connection on PostgreSQL) inside the exclusive section (sql.js), the
 * transactions `transaction()` opens and the runners they hold, guarded writes that wait for a
 * row lock at most `lockTimeoutMs`, and the `IdempotencyStoreError` a failure becomes.
 */
import { AsyncResource } from 'node:async_hooks';
import type { DataSource, QueryRunner } from 'typeorm';
import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type {
  DurableClaimTransaction,
  DurableTransaction,
  TransactionalClaimResult,
} from '../stores/durable-idempotency-store.js';
import type { ClaimRequest } from '../stores/idempotency-store.js';
import { changedOne, decodeRecord, integer, single, type Row } from './idempotency-record.codec.js';
import { IDEMPOTENCY_RECORDS_TABLE } from './idempotency-record.entity.js';
import {
  LOCK_NOT_AVAILABLE,
  SERIALIZATION_FAILURE,
  sqlState,
  statementsFor,
  type Dialect,
  type Statements,
} from './idempotency-records.sql.js';
import type { RunExclusive } from './sqljs-exclusive-queue.js';

/** Where the handler's writes begin in a route's transaction (PostgreSQL and SQLite spell it alike). */
const HANDLER_SAVEPOINT_NAME = 'idempotency_handler';
const HANDLER_SAVEPOINT = `SAVEPOINT ${HANDLER_SAVEPOINT_NAME}`;
const UNDO_HANDLER_WRITES = `ROLLBACK TO SAVEPOINT ${HANDLER_SAVEPOINT_NAME}`;

/** The few members of node-postgres' `Client` the store's own statements use (typeorm is the only import). */
interface PgClient {
  query(text: string, values?: unknown[]): Promise<{ rows: Row[]; rowCount: number | null }>;
}

/** What one statement answered: its rows (RETURNING, SELECT) and how many rows it changed. */
interface StatementResult {
  records: Row[];
  affected?: number;
}

/** `claimInTransaction`'s attempts at the insert: see MAX_CLAIM_ATTEMPTS in the store. */
const MAX_TRANSACTIONAL_CLAIM_ATTEMPTS = 5;

/** @internal */
export class IdempotencyRecordsConnection {
  /** Transactions opened by `transaction()` whose `work` has not settled yet, with their runner. */
  private readonly openTransactions = new WeakMap<DurableTransaction, QueryRunner>();
  /** The same runners by claim (`key`, owner token): the owner's heartbeat renews through them. */
  private readonly claimsInTransaction = new Map<string, QueryRunner>();
  /** Built on first use: on PostgreSQL the schema is known once the DataSource is connected. */
  private statements?: Statements;

  constructor(
    private readonly dataSource: DataSource,
    readonly dialect: Dialect,
    readonly lockTimeoutMs: number,
    private readonly exclusive: RunExclusive,
  ) {}

  /** Runs `work` in a transaction that holds the row of the claim (see `TypeOrmIdempotencyStore.transaction`). */
  transaction<T>(key: string, ownerToken: string, work: (transaction: DurableTransaction) => Promise<T>): Promise<T> {
    return this.exclusive(() => this.runTransaction(key, ownerToken, work));
  }

  /**
   * `TypeOrmIdempotencyStore.claimInTransaction`: BEGIN and the claim's INSERT on a connection of
   * its own, left open for the engine. On sql.js the exclusive section is held until the
   * transaction ends (commit or rollback), as `transaction()` holds it for its work.
   */
  claimInTransaction(
    key: string,
    request: ClaimRequest,
    completion: (response: StoredResponse) => unknown[],
  ): Promise<TransactionalClaimResult> {
    return new Promise<TransactionalClaimResult>((resolve, reject) => {
      this.exclusive(async () => {
        const opened = await this.openClaim(key, request, completion);
        resolve(opened.result);
        await opened.ended;
      }).catch(reject);
    });
  }

  /** The runner of a transaction whose `work` is still running, or undefined. */
  runnerOf(transaction: DurableTransaction): QueryRunner | undefined {
    return this.openTransactions.get(transaction);
  }

  /** The runner of the owner's open `transaction()` on this claim, or undefined. */
  runnerHolding(key: string, ownerToken: string): QueryRunner | undefined {
    return this.claimsInTransaction.get(claimId(key, ownerToken));
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
      this.statements = statementsFor(this.dialect, table, this.lockTimeoutMs);
    }
    return this.statements;
  }

  run(runner: QueryRunner, sql: string, params: unknown[]) {
    return runner.query(sql, params, true);
  }

  /** PostgreSQL binds a JS boolean; sql.js is given 0 / 1, which is what SQLite stores. */
  boolean(value: boolean): boolean | number {
    return this.dialect === 'postgres' ? value : Number(value);
  }

  failure(operation: string, error: unknown): Error {
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

  /**
   * A guarded UPDATE that may meet the row lock of a live `transaction()`. On PostgreSQL it runs
   * in a short transaction whose `lock_timeout` is `lockTimeoutMs`, and answers 'locked' when the
   * lock is not granted in time; on SQLite there are no row locks to meet.
   */
  async writeWaitingForLock(runner: QueryRunner, sql: string, params: unknown[]): Promise<Row[] | 'locked'> {
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
      const transaction: DurableTransaction = Object.freeze({
        manager: runner.manager,
        savepoint: async () => {
          await this.run(runner, HANDLER_SAVEPOINT, []);
          return async () => void (await this.run(runner, UNDO_HANDLER_WRITES, []));
        },
      });
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
   * The statements of `claimInTransaction` up to the claimed row: INSERT as the first statement
   * (it waits for another transaction's uncommitted row of the key, at most `lockTimeoutMs`), and
   * on a conflict the row as committed, read in the same transaction: an expired one is replaced
   * there, anything else ends the transaction and is returned.
   */
  private async openClaim(
    key: string,
    request: ClaimRequest,
    completion: (response: StoredResponse) => unknown[],
  ): Promise<{ result: TransactionalClaimResult; ended?: Promise<void> }> {
    const runner = this.connect('claimInTransaction');
    const claimParams = [key, request.fingerprint, request.ownerToken, request.leaseMs, request.ttlMs];
    let claimed: IdempotencyRecord | undefined;
    let existing: { record: IdempotencyRecord; nowMs: number } | undefined;
    let phase: 'insert' | 'replace' = 'insert';
    try {
      await runner.startTransaction();
      // The store's own statements go to the driver, past TypeORM's query layer; the handler
      // gets `runner.manager`, the same connection and transaction.
      const client = this.dialect === 'postgres' ? ((await runner.connect()) as PgClient) : undefined;
      const exec = (sql: string, params: unknown[]) => this.exec(runner, client, sql, params);
      for (let attempt = 1; attempt <= MAX_TRANSACTIONAL_CLAIM_ATTEMPTS && !claimed && !existing; attempt += 1) {
        phase = 'insert';
        const inserted = (await exec(this.sql.insertInTransaction, claimParams)).records;
        if (inserted.length > 0) {
          claimed = decodeRecord(single(inserted));
          break;
        }
        const rows = (await exec(this.sql.select, [key])).records;
        if (rows.length === 0) continue; // released or reaped in between: insert again
        const row = single(rows);
        const current = { record: decodeRecord(row), nowMs: integer(row, 'now_ms', 0) };
        if (current.record.expiresAtMs > current.nowMs) {
          existing = current;
          break;
        }
        phase = 'replace';
        existing = current; // what a lock timeout on the expired row answers
        const replaced = (await exec(this.sql.replaceExpired, claimParams)).records;
        existing = undefined;
        if (replaced.length > 0) claimed = decodeRecord(single(replaced));
      }
      if (!claimed) {
        await runner.rollbackTransaction();
        await runner.release();
        if (existing) return { result: { kind: 'existing', ...existing } };
        throw new IdempotencyStoreError(
          `Durable idempotency store (${this.dialect}): a claim did not settle after ${MAX_TRANSACTIONAL_CLAIM_ATTEMPTS} ` +
            'attempts because the row kept changing under it; retry the request.',
          'durable',
        );
      }
      return this.openTransaction(key, request.ownerToken, runner, client, claimed, completion);
    } catch (error) {
      await rollbackQuietly(runner);
      await releaseQuietly(runner);
      const state = sqlState(error);
      if (state === LOCK_NOT_AVAILABLE) {
        // The key's row is held by a live transaction: the insert of a running claim (busy), or
        // an expired row an older transaction still holds (its owner is at work: as takeOver).
        if (phase === 'insert') return { result: { kind: 'busy' } };
        if (existing) return { result: { kind: 'existing', ...existing } };
      }
      // Under a stricter isolation level the insert that waited for a claim that then committed
      // fails instead of seeing it: the key is as busy as it was, and a retry reads the answer.
      if (state === SERIALIZATION_FAILURE && phase === 'insert') return { result: { kind: 'busy' } };
      throw this.failure('claimInTransaction', error);
    }
  }

  /** The handle of a claimed, open transaction, and the promise that settles once it has ended. */
  private openTransaction(
    key: string,
    ownerToken: string,
    runner: QueryRunner,
    client: PgClient | undefined,
    record: IdempotencyRecord,
    completion: (response: StoredResponse) => unknown[],
  ): { result: TransactionalClaimResult; ended: Promise<void> } {
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    let open = true;
    // sql.js: the async context the claim was made in, inside the exclusive section, where the
    // handler's own serialized calls must run (elsewhere they would wait for this transaction to
    // end). PostgreSQL has no section: the handler keeps its caller's context (its trace).
    const context = this.dialect === 'postgres' ? undefined : new AsyncResource('IdempotencyClaimTransaction');
    const claim = claimId(key, ownerToken);
    const exec = (sql: string, params: unknown[]) => this.exec(runner, client, sql, params);
    const close = (): boolean => {
      if (!open) return false;
      open = false;
      this.openTransactions.delete(transaction);
      this.claimsInTransaction.delete(claim);
      return true;
    };
    const checkOpen = (operation: string) => {
      if (!open) throw new TypeError(`${operation}() on a claim transaction that has already ended`);
    };
    const transaction: DurableClaimTransaction = Object.freeze({
      manager: runner.manager,
      record,
      savepoint: async () => {
        checkOpen('savepoint');
        try {
          // PostgreSQL: one round trip puts the application's lock_timeout back for the handler
          // and marks where its writes begin.
          await exec(
            this.sql.restoreLockTimeout ? `${this.sql.restoreLockTimeout}; ${HANDLER_SAVEPOINT}` : HANDLER_SAVEPOINT,
            [],
          );
        } catch (error) {
          throw this.failure('claimInTransaction savepoint', error);
        }
        return async () => {
          checkOpen('undo');
          try {
            await exec(UNDO_HANDLER_WRITES, []);
          } catch (error) {
            throw this.failure('claimInTransaction undo', error);
          }
        };
      },
      run: <T>(work: () => Promise<T>): Promise<T> => (context ? context.runInAsyncScope(work) : work()),
      complete: async (response: StoredResponse) => {
        checkOpen('complete');
        const params = completion(response);
        try {
          return changedOne(await exec(this.sql.complete, params));
        } catch (error) {
          throw this.failure('complete', error);
        }
      },
      commit: async () => {
        checkOpen('commit');
        close();
        try {
          try {
            await runner.commitTransaction();
          } catch (error) {
            await rollbackQuietly(runner);
            await releaseQuietly(runner);
            throw this.failure('transaction commit', error);
          }
          try {
            // On sql.js, releasing is when a file-backed database is saved (autoSave).
            await runner.release();
          } catch (error) {
            throw this.failure('transaction commit', error);
          }
        } finally {
          context?.emitDestroy();
          end();
        }
      },
      rollback: async () => {
        if (!close()) return;
        await rollbackQuietly(runner);
        await releaseQuietly(runner);
        context?.emitDestroy();
        end();
      },
    });
    this.openTransactions.set(transaction, runner);
    this.claimsInTransaction.set(claim, runner);
    return { result: { kind: 'claimed', transaction }, ended };
  }

  /** One of the store's own statements: through the pg client when there is one, else TypeORM's runner. */
  private async exec(
    runner: QueryRunner,
    client: PgClient | undefined,
    sql: string,
    params: unknown[],
  ): Promise<StatementResult> {
    if (!client) return this.run(runner, sql, params);
    // No parameters: the simple protocol, so that several statements may share one round trip.
    const result = params.length === 0 ? await client.query(sql) : await client.query(sql, params);
    // A multi-statement query answers one result per statement: the last one is the one read.
    const last = (Array.isArray(result) ? result.at(-1) : result) as { rows: Row[]; rowCount: number | null };
    return { records: last.rows ?? [], affected: last.rowCount ?? undefined };
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
}

function claimId(key: string, ownerToken: string): string {
  return `${key}\u0000${ownerToken}`;
}

async function rollbackQuietly(runner: QueryRunner): Promise<void> {
  // The original error is the one worth reporting; a failed rollback on a broken connection is
  // discarded with that connection by the pool.
  if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
}

async function releaseQuietly(runner: QueryRunner): Promise<void> {
  await runner.release().catch(() => undefined);
}
