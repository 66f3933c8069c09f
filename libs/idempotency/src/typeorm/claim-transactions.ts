/**
 * `TypeOrmIdempotencyStore.claimInTransaction`: BEGIN and the claim's INSERT on a connection of
 * its own, left open for the engine as a `DurableClaimTransaction` (the handler's writes, the
 * completion and one COMMIT). @internal
 */
import { AsyncResource } from 'node:async_hooks';
import type { QueryRunner } from 'typeorm';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type {
  DurableClaimTransaction,
  DurableTransactionOptions,
  TransactionalClaimResult,
} from '../stores/durable-idempotency-store.js';
import type { ClaimRequest } from '../stores/idempotency-store.js';
import { changedOne, decodeRecord, integer, single, type Row } from './idempotency-record.codec.js';
import type { IdempotencyRecordsConnection } from './idempotency-records.connection.js';
import {
  answeredByServer,
  isNotCompleted,
  LOCK_NOT_AVAILABLE,
  PREPARED_STATEMENT_EXISTS,
  PREPARED_STATEMENT_MISSING,
  SERIALIZATION_FAILURE,
  sqlState,
  UNIQUE_VIOLATION,
} from './idempotency-records.sql.js';
import {
  beginningTransaction,
  beginStatement,
  committingTransaction,
  sendTogether,
  syncPreparedStatements,
  valueOf,
  type PgClient,
  type PgResult,
} from './pg-pipeline.js';
import { HANDLER_SAVEPOINT, releaseQuietly, rollbackQuietly, UNDO_HANDLER_WRITES } from './query-runners.js';

/** What one statement answered: its rows (RETURNING, SELECT) and how many rows it changed. */
interface StatementResult {
  records: Row[];
  affected?: number;
}

/** `claimInTransaction`'s attempts at the insert: see MAX_CLAIM_ATTEMPTS in the store. */
const MAX_TRANSACTIONAL_CLAIM_ATTEMPTS = 5;

/** @internal */
export class ClaimTransactions {
  constructor(private readonly db: IdempotencyRecordsConnection) {}

  /**
   * On sql.js the exclusive section is held until the transaction ends (commit or rollback), as
   * `transaction()` holds it for its work.
   */
  open(
    key: string,
    request: ClaimRequest,
    completion: (response: StoredResponse) => unknown[],
    options: DurableTransactionOptions,
  ): Promise<TransactionalClaimResult> {
    return new Promise<TransactionalClaimResult>((resolve, reject) => {
      this.db
        .exclusive(async () => {
          const opened = await this.openClaim(key, request, completion, options);
          resolve(opened.result);
          await opened.ended;
        })
        .catch(reject);
    });
  }

  /**
   * The statements of `claimInTransaction` up to the claimed row: INSERT as the first statement
   * (it waits for another transaction's uncommitted row of the key, at most `lockTimeoutMs`), and
   * on a conflict the row as committed, read in the same transaction: an expired one is replaced
   * there, anything else ends the transaction and is returned. PostgreSQL tries a plain INSERT
   * first (see `insertClaim`): the common case, a new key, then adds no SSI conflict with other keys.
   */
  private async openClaim(
    key: string,
    request: ClaimRequest,
    completion: (response: StoredResponse) => unknown[],
    options: DurableTransactionOptions,
  ): Promise<{ result: TransactionalClaimResult; ended?: Promise<void> }> {
    if (this.db.dialect === 'mysql') {
      const opened = await this.db.mysql.openClaim(key, request, options);
      if ('result' in opened) return opened;
      return this.openTransaction(key, request.ownerToken, opened.runner, undefined, opened.record, {
        completion,
        handlerSavepoint: false,
        options,
      });
    }
    const runner = this.db.connect('claimInTransaction');
    const claimParams = [key, request.fingerprint, request.ownerToken, request.leaseMs, request.ttlMs];
    let claimed: IdempotencyRecord | undefined;
    let insertedAt: string | undefined;
    let handlerSavepoint = false;
    let existing: { record: IdempotencyRecord; nowMs: number } | undefined;
    let phase: 'insert' | 'replace' = 'insert';
    try {
      // The store's own statements go to the driver, past TypeORM's query layer; the handler
      // gets `runner.manager`, the same connection and transaction.
      const client = this.db.dialect === 'postgres' ? ((await runner.connect()) as PgClient) : undefined;
      const exec = (sql: string, params: unknown[]) => this.exec(runner, client, sql, params);
      if (client && this.db.sql.insertClaim) {
        // BEGIN, the claim and the handler's savepoint in one round trip: a failed claim leaves
        // the transaction aborted, and the SAVEPOINT behind it fails with it.
        const begun = await beginningTransaction(runner);
        const [begin, insert, savepoint] = await sendTogether(client, [
          [beginStatement(this.db.isolationLevel(options))],
          [this.db.sql.insertClaim, claimParams, this.db.preparedName(this.db.sql.insertClaim)],
          [HANDLER_SAVEPOINT],
        ]);
        valueOf(begin);
        await begun();
        this.db.routes.guardIsolation(runner, options);
        try {
          const inserted = single(valueOf(insert).rows);
          valueOf(savepoint);
          claimed = decodeRecord(inserted);
          insertedAt = String(inserted.row_ctid);
          handlerSavepoint = true;
        } catch (error) {
          const state = sqlState(error);
          const unprepared = state === PREPARED_STATEMENT_MISSING || state === PREPARED_STATEMENT_EXISTS;
          if (state !== UNIQUE_VIOLATION && !unprepared) throw error;
          // The key has a committed row, or the client's prepared statements are not the
          // connection's: start again, reading the row in the same transaction (after which the
          // client knows what this connection holds, for the completion).
          await runner.rollbackTransaction();
          await this.db.begin(runner, options);
          if (unprepared) await syncPreparedStatements(client);
        }
      } else {
        await this.db.begin(runner, options);
      }
      for (let attempt = 1; attempt <= MAX_TRANSACTIONAL_CLAIM_ATTEMPTS && !claimed && !existing; attempt += 1) {
        phase = 'insert';
        const inserted = (await exec(this.db.sql.insertInTransaction, claimParams)).records;
        if (inserted.length > 0) {
          claimed = decodeRecord(single(inserted));
          break;
        }
        const rows = (await exec(this.db.sql.select, [key])).records;
        if (rows.length === 0) continue; // released or reaped in between: insert again
        const row = single(rows);
        const current = { record: decodeRecord(row), nowMs: integer(row, 'now_ms', 0) };
        if (current.record.expiresAtMs > current.nowMs) {
          existing = current;
          break;
        }
        phase = 'replace';
        existing = current; // what a lock timeout on the expired row answers
        const replaced = (await exec(this.db.sql.replaceExpired, claimParams)).records;
        existing = undefined;
        if (replaced.length > 0) claimed = decodeRecord(single(replaced));
      }
      if (!claimed) {
        await runner.rollbackTransaction();
        await runner.release();
        if (existing) return { result: { kind: 'existing', ...existing } };
        throw new IdempotencyStoreError(
          `Durable idempotency store (${this.db.dialect}): a claim did not settle after ${MAX_TRANSACTIONAL_CLAIM_ATTEMPTS} ` +
            'attempts because the row kept changing under it; retry the request.',
          'durable',
        );
      }
      return this.openTransaction(key, request.ownerToken, runner, client, claimed, {
        completion,
        insertedAt,
        handlerSavepoint,
        options,
      });
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
      throw this.db.failure('claimInTransaction', error);
    }
  }

  /** The handle of a claimed, open transaction, and the promise that settles once it has ended. */
  private openTransaction(
    key: string,
    ownerToken: string,
    runner: QueryRunner,
    client: PgClient | undefined,
    record: IdempotencyRecord,
    how: {
      completion: (response: StoredResponse) => unknown[];
      /** The `ctid` of the row `insertClaim` inserted (PostgreSQL), which `complete` finds it by. */
      insertedAt?: string;
      /** The handler's savepoint was taken with the claim, and the claim's `lock_timeout` restored. */
      handlerSavepoint: boolean;
      options: DurableTransactionOptions;
    },
  ): { result: TransactionalClaimResult; ended: Promise<void> } {
    const { completion, insertedAt, handlerSavepoint, options } = how;
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    let open = true;
    // sql.js: the async context the claim was made in, inside the exclusive section, where the
    // handler's own serialized calls must run (elsewhere they would wait for this transaction to
    // end). PostgreSQL has no section: the handler keeps its caller's context (its trace).
    const context = this.db.dialect === 'postgres' ? undefined : new AsyncResource('IdempotencyClaimTransaction');
    const exec = (sql: string, params: unknown[]) => this.exec(runner, client, sql, params);
    const close = (): boolean => {
      if (!open) return false;
      open = false;
      this.db.openTransactions.remove(transaction, key, ownerToken);
      return true;
    };
    const checkOpen = (operation: string) => {
      if (!open) throw new TypeError(`${operation}() on a claim transaction that has already ended`);
    };
    const undo = async () => {
      checkOpen('undo');
      try {
        await exec(UNDO_HANDLER_WRITES, []);
      } catch (error) {
        throw this.db.failure('claimInTransaction undo', error);
      }
    };
    /** The COMMIT `complete` sent with the completion (`commitOnComplete`): what `commit` reports. */
    let commitSent: { failure?: unknown } | undefined;
    /**
     * The completion and the COMMIT in one round trip. The completion fails when it changes no row
     * (`completeOrAbort`), so the COMMIT behind it answers ROLLBACK: the business writes never
     * commit without their completed record. An error the database answered to the completion
     * means nothing committed; no answer at all (a lost connection) leaves the COMMIT's outcome
     * unknown, which `commit` reports as its failure.
     */
    const completeAndCommit = async (pg: PgClient, sql: string, values: unknown[]): Promise<boolean> => {
      const committing = await committingTransaction(runner);
      const [update, commit] = await sendTogether(pg, [[sql, values, this.db.preparedName(sql)], ['COMMIT']]);
      const committed =
        update.status === 'fulfilled' && commit.status === 'fulfilled' && commit.value.command === 'COMMIT';
      await committing(committed);
      if (update.status === 'rejected' && answeredByServer(update.reason)) {
        close();
        await rollbackQuietly(runner);
        await releaseQuietly(runner);
        context?.emitDestroy();
        end();
        if (isNotCompleted(update.reason)) return false;
        throw this.db.failure('complete', update.reason);
      }
      if (!committed) {
        const failure =
          update.status === 'rejected' ? update.reason : commit.status === 'rejected' ? commit.reason : undefined;
        commitSent = { failure: failure ?? new Error('COMMIT answered ROLLBACK') };
      } else {
        commitSent = {};
      }
      return true;
    };
    const transaction: DurableClaimTransaction = Object.freeze({
      manager: runner.manager,
      record,
      savepoint: async () => {
        checkOpen('savepoint');
        try {
          if (handlerSavepoint) return undo;
          // PostgreSQL: one round trip puts the application's lock_timeout back for the handler
          // and marks where its writes begin.
          await exec(
            this.db.sql.restoreLockTimeout
              ? `${this.db.sql.restoreLockTimeout}; ${HANDLER_SAVEPOINT}`
              : HANDLER_SAVEPOINT,
            [],
          );
        } catch (error) {
          throw this.db.failure('claimInTransaction savepoint', error);
        }
        return undo;
      },
      run: <T>(work: () => Promise<T>): Promise<T> => {
        const asRoute = () => this.db.routes.run(runner, options, work);
        return context ? context.runInAsyncScope(asRoute) : asRoute();
      },
      complete: async (response: StoredResponse) => {
        checkOpen('complete');
        const params = completion(response);
        const values = insertedAt === undefined ? params : [...params, insertedAt];
        if (client && options.commitOnComplete) {
          const sql = insertedAt === undefined ? this.db.sql.completeOrAbort : this.db.sql.completeInsertedOrAbort;
          return completeAndCommit(client, sql, values);
        }
        try {
          return changedOne(
            await exec(insertedAt === undefined ? this.db.sql.complete : this.db.sql.completeInserted, values),
          );
        } catch (error) {
          throw this.db.failure('complete', error);
        }
      },
      commit: async () => {
        checkOpen('commit');
        close();
        try {
          try {
            if (commitSent) {
              if (commitSent.failure !== undefined) throw commitSent.failure;
            } else {
              await runner.commitTransaction();
            }
          } catch (error) {
            await rollbackQuietly(runner);
            await releaseQuietly(runner);
            throw this.db.failure('transaction commit', error);
          }
          try {
            // On sql.js, releasing is when a file-backed database is saved (autoSave).
            await runner.release();
          } catch (error) {
            throw this.db.failure('transaction commit', error);
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
    this.db.openTransactions.add(transaction, key, ownerToken, runner);
    return { result: { kind: 'claimed', transaction }, ended };
  }

  /** One of the store's own statements: through the pg client when there is one, else TypeORM's runner. */
  private async exec(
    runner: QueryRunner,
    client: PgClient | undefined,
    sql: string,
    params: unknown[],
  ): Promise<StatementResult> {
    if (!client) return this.db.run(runner, sql, params);
    // No parameters: the simple protocol, so that several statements may share one round trip.
    const result = params.length === 0 ? await client.query(sql) : await client.query(sql, params);
    // A multi-statement query answers one result per statement: the last one is the one read.
    const last: PgResult = Array.isArray(result) ? (result as PgResult[]).at(-1)! : result;
    return { records: last.rows ?? [], affected: last.rowCount ?? undefined };
  }
}
