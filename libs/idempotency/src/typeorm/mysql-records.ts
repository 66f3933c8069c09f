/**
 * The TypeORM store's writes on MySQL and MariaDB that other dialects make with one `RETURNING`
 * statement or `FOR UPDATE SKIP LOCKED` in a subquery, neither of which MySQL 8 has: claims and
 * takeovers, guarded writes that wait for a row lock at most `lockTimeoutMs`, the reaper's batch,
 * and the first statements of a claim in a transaction. @internal
 */
import type { QueryRunner } from 'typeorm';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord } from '../interfaces/idempotency-record.interface.js';
import type { DurableTransactionOptions, TransactionalClaimResult } from '../stores/durable-idempotency-store.js';
import type { ClaimRequest, ClaimResult, ForceDeleteScope } from '../stores/idempotency-store.js';
import { affectedRows, decodeRecord, integer, recordWithClock, single, type Row } from './idempotency-record.codec.js';
import type { IdempotencyRecordsConnection } from './idempotency-records.connection.js';
import {
  isMysqlDeadlock,
  isMysqlLockNotAvailable,
  MYSQL_DUPLICATE_KEY,
  mysqlErrno,
} from './idempotency-records.mysql.js';
import { releaseQuietly, rollbackQuietly } from './query-runners.js';

/** As the store's MAX_CLAIM_ATTEMPTS: a row that keeps changing under a claim ends it with a store error. */
const MAX_ATTEMPTS = 5;
/** The longest pause between two `NOWAIT` attempts at a row lock. */
const MAX_LOCK_POLL_MS = 50;

/** What a guarded write did: the rows it changed, and the row it wrote when asked to read it back. */
interface GuardedWrite {
  affected: number;
  record?: IdempotencyRecord;
}

/** A claim in a transaction that got its row: the open transaction's runner and the claimed record. */
export interface MysqlOpenClaim {
  runner: QueryRunner;
  record: IdempotencyRecord;
}

/** @internal */
export class MysqlRecords {
  constructor(private readonly db: IdempotencyRecordsConnection) {}

  /**
   * `claim`, or with `expectedOwnerToken` `takeOver`. A claim reads first, without a lock (a row a
   * live `transaction()` holds is answered at once, as on PostgreSQL, where an INSERT's duplicate
   * check would wait for it), then inserts a missing row (see {@link insertWithBoundedWait}).
   */
  async acquire(
    runner: QueryRunner,
    key: string,
    request: ClaimRequest,
    expectedOwnerToken: string | undefined,
  ): Promise<ClaimResult> {
    const sql = this.db.mysqlSql;
    const claimParams = [key, request.fingerprint, request.ownerToken, request.leaseMs, request.ttlMs];
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt += 1) {
      if (expectedOwnerToken !== undefined) {
        const taken = await this.writeWhenUnlocked(
          runner,
          key,
          sql.takeOver,
          [key, expectedOwnerToken, request.ownerToken, request.fingerprint, request.leaseMs, request.ttlMs],
          request.ownerToken,
        );
        if (taken === 'locked') {
          const current = await this.read(runner, key);
          if (current) return { kind: 'existing', ...current };
          continue;
        }
        if (taken.record) return { kind: 'claimed', record: taken.record };
      }
      const row = single((await this.db.run(runner, sql.readWithClock, [key])).records);
      const nowMs = integer(row, 'now_ms', 0);
      if (row.state === null) {
        const inserted = await this.insertWithBoundedWait(runner, key, request);
        if (inserted === 'duplicate') continue; // claimed in between: read it
        if (inserted === 'locked') {
          // A claim has no `busy` answer and there is no committed row to answer `existing` with;
          // as on PostgreSQL, a lock wait that elapses is a store error, and the handler never runs.
          throw new IdempotencyStoreError(
            `Durable idempotency store (mysql): a claim of ${key} waited ${this.db.lockTimeoutMs} ms (whole seconds, ` +
              "rounded up) for another transaction's uncommitted claim of the key (a transactional route " +
              'whose handler is still at work); retry the request.',
            'durable',
          );
        }
        return { kind: 'claimed', record: inserted };
      }
      const record = decodeRecord(row);
      if (record.expiresAtMs > nowMs) return { kind: 'existing', record, nowMs };
      const replaced = await this.writeWhenUnlocked(runner, key, sql.replaceExpired, claimParams, request.ownerToken);
      // An expired row locked by a live transaction: its owner is still at work, as in takeOver.
      if (replaced === 'locked') return { kind: 'existing', record, nowMs };
      if (replaced.record) return { kind: 'claimed', record: replaced.record };
    }
    throw new IdempotencyStoreError(
      `Durable idempotency store (mysql): a claim did not settle after ${MAX_ATTEMPTS} attempts ` +
        'because the row kept changing under it; retry the request.',
      'durable',
    );
  }

  /**
   * One batch of the reaper, in a short READ COMMITTED transaction: the keys of expired rows no
   * transaction holds (`SKIP LOCKED`), then their DELETE.
   */
  async deleteExpired(runner: QueryRunner, batchSize: number, nowMs: number | undefined): Promise<number> {
    const sql = this.db.mysqlSql;
    const at = nowMs ?? null;
    for (let attempt = 1; ; attempt += 1) {
      await runner.startTransaction('READ COMMITTED');
      try {
        const keys = (await this.db.run(runner, sql.lockExpired, [at, batchSize])).records.map((row) => row.key);
        const deleted =
          keys.length === 0 ? 0 : affectedRows(await this.db.run(runner, sql.deleteLocked(keys.length), [at, ...keys]));
        await runner.commitTransaction();
        return deleted;
      } catch (error) {
        await rollbackQuietly(runner);
        // Reapers of several instances can deadlock on the table's secondary indexes (a DELETE
        // removes entries another reaper's scan has locked); the victim deleted nothing: again.
        if (!isMysqlDeadlock(error) || attempt === MAX_ATTEMPTS) throw error;
      }
    }
  }

  /**
   * The INSERT of a new claim, with the session's `innodb_lock_wait_timeout` set to
   * `lockTimeoutMs` (whole seconds) and put back on every path: its duplicate check waits for
   * another transaction's uncommitted row of the key (a transactional route's claim) at most that
   * long ('locked'), not the server's 50 s default. Its clock is read when it starts, before any
   * wait, so the row is stamped again in the same transaction (no reader sees the first stamps)
   * and read back once committed: a lease never starts before the wait ended. The transaction
   * holds the new row for those two statements only. 'duplicate' when a row of the key was
   * committed first, or the claim was a deadlock's victim (it inserted nothing): the caller reads
   * the row again.
   */
  private async insertWithBoundedWait(
    runner: QueryRunner,
    key: string,
    request: ClaimRequest,
  ): Promise<IdempotencyRecord | 'duplicate' | 'locked'> {
    const sql = this.db.mysqlSql;
    const run = async (statement: string, params: unknown[]): Promise<Row[]> =>
      (await this.db.run(runner, statement, params)).records;
    await run(sql.saveAndSetLockWait, []);
    try {
      await runner.startTransaction();
      await run(sql.insert, [key, request.fingerprint, request.ownerToken, request.leaseMs, request.ttlMs]);
      await run(sql.restamp, [key, request.ownerToken, request.leaseMs, request.ttlMs]);
      await runner.commitTransaction();
    } catch (error) {
      await rollbackQuietly(runner);
      // Deadlocks: the waiters of a claim that rolled back both inserting, or a reaper's DELETE
      // against the index entries the restamp writes.
      if (mysqlErrno(error) === MYSQL_DUPLICATE_KEY || isMysqlDeadlock(error)) return 'duplicate';
      if (isMysqlLockNotAvailable(error)) return 'locked';
      throw error;
    } finally {
      // A pooled connection must not keep the claim's lock wait; one too broken to take the
      // restore fails here, and the operation's store error says so.
      await run(sql.restoreLockWait, []);
    }
    const owned = await run(sql.selectOwned, [key, request.ownerToken]);
    // Reaped or replaced already (a lease shorter than the round trips): no claim to answer.
    return owned.length === 0 ? 'duplicate' : decodeRecord(single(owned));
  }

  /** `forceDelete`: 'locked' when a live transaction holds the row past `lockTimeoutMs`. */
  async forceDelete(runner: QueryRunner, key: string, scope: ForceDeleteScope): Promise<boolean | 'locked'> {
    const sql = this.db.mysqlSql;
    const deleted = await this.writeWhenUnlocked(
      runner,
      key,
      scope === 'any' ? sql.forceDeleteAny : sql.forceDeleteInProgress,
      [key],
    );
    return deleted === 'locked' ? deleted : deleted.affected === 1;
  }

  /**
   * The first statements of `claimInTransaction`: the session's `innodb_lock_wait_timeout` set to
   * `lockTimeoutMs` (whole seconds), BEGIN, and the INSERT, which waits for another transaction's
   * uncommitted row of the key. On a duplicate, the row as committed, read under the shared lock
   * the duplicate check took: an expired one is replaced in the transaction, anything else ends
   * it and is returned. The lock wait is put back before the handler runs. A lock wait that
   * elapses, or a deadlock (the waiters of a claim that rolled back both try to insert), answers
   * `busy` during the insert; a lock wait that elapses while replacing an expired row another
   * transaction holds answers `existing`, and a deadlock there claims again (`attempt`).
   */
  async openClaim(
    key: string,
    request: ClaimRequest,
    options: DurableTransactionOptions,
    attempt = 1,
  ): Promise<{ result: TransactionalClaimResult } | MysqlOpenClaim> {
    const sql = this.db.mysqlSql;
    const runner = this.db.connect('claimInTransaction');
    const claimParams = [key, request.fingerprint, request.ownerToken, request.leaseMs, request.ttlMs];
    const run = async (statement: string, params: unknown[]): Promise<Row[]> =>
      (await this.db.run(runner, statement, params)).records;
    let waitSet = false;
    let phase: 'insert' | 'replace' = 'insert';
    let existing: { record: IdempotencyRecord; nowMs: number } | undefined;
    try {
      await run(sql.saveAndSetLockWait, []);
      waitSet = true;
      await this.db.begin(runner, options);
      let claimed: IdempotencyRecord | undefined;
      for (let attempt = 1; attempt <= MAX_ATTEMPTS && !claimed && !existing; attempt += 1) {
        phase = 'insert';
        try {
          await run(sql.insert, claimParams);
          claimed = decodeRecord(single(await run(sql.selectOwned, [key, request.ownerToken])));
          break;
        } catch (error) {
          if (mysqlErrno(error) !== MYSQL_DUPLICATE_KEY) throw error;
        }
        const current = recordWithClock(await run(sql.selectShared, [key]));
        if (!current) continue; // released or reaped in between: insert again
        if (current.record.expiresAtMs > current.nowMs) {
          existing = current;
          break;
        }
        phase = 'replace';
        existing = current; // what a lock timeout on the expired row answers
        const replaced = affectedRows(await this.db.run(runner, sql.replaceExpired, claimParams));
        existing = undefined;
        if (replaced === 1) claimed = decodeRecord(single(await run(sql.selectOwned, [key, request.ownerToken])));
      }
      if (!claimed) {
        await runner.rollbackTransaction();
        await run(sql.restoreLockWait, []);
        await runner.release();
        if (existing) return { result: { kind: 'existing', ...existing } };
        throw new IdempotencyStoreError(
          `Durable idempotency store (mysql): a claim did not settle after ${MAX_ATTEMPTS} attempts ` +
            'because the row kept changing under it; retry the request.',
          'durable',
        );
      }
      await run(sql.restoreLockWait, []);
      return { runner, record: claimed };
    } catch (error) {
      await rollbackQuietly(runner);
      if (waitSet) await this.db.run(runner, sql.restoreLockWait, []).catch(() => undefined);
      await releaseQuietly(runner);
      // Two claims replacing one expired row both hold its shared lock and both want it exclusive:
      // InnoDB rolls the victim back at once. The row it read is no answer (expired, and being
      // replaced): it claims again, and then waits for the winner like any duplicate.
      if (isMysqlDeadlock(error) && phase === 'replace' && attempt < MAX_ATTEMPTS) {
        return this.openClaim(key, request, options, attempt + 1);
      }
      if (isMysqlLockNotAvailable(error) || isMysqlDeadlock(error)) {
        if (phase === 'insert') return { result: { kind: 'busy' } };
        if (existing) return { result: { kind: 'existing', ...existing } };
      }
      throw this.db.failure('claimInTransaction', error);
    }
  }

  /**
   * A guarded write in a short READ COMMITTED transaction (no gap locks): the row's lock first,
   * taken with `NOWAIT` and polled until `lockTimeoutMs` has passed ('locked' then), so the wait
   * keeps millisecond precision where `innodb_lock_wait_timeout` counts whole seconds. With
   * `readBackOwner`, the row the write left is read in the same transaction (MySQL has no RETURNING).
   */
  private async writeWhenUnlocked(
    runner: QueryRunner,
    key: string,
    sql: string,
    params: unknown[],
    readBackOwner?: string,
  ): Promise<GuardedWrite | 'locked'> {
    for (let attempt = 1; ; attempt += 1) {
      await runner.startTransaction('READ COMMITTED');
      try {
        if (!(await this.lockRow(runner, key))) {
          await runner.rollbackTransaction();
          return 'locked';
        }
        const affected = affectedRows(await this.db.run(runner, sql, params));
        const record =
          affected === 1 && readBackOwner !== undefined
            ? decodeRecord(
                single((await this.db.run(runner, this.db.mysqlSql.selectOwned, [key, readBackOwner])).records),
              )
            : undefined;
        await runner.commitTransaction();
        return { affected, record };
      } catch (error) {
        await rollbackQuietly(runner);
        // The write holds the row's lock and wants its index entries, which a completion of the
        // same row in autocommit can hold while it waits for the row: the victim changed nothing.
        if (!isMysqlDeadlock(error) || attempt === MAX_ATTEMPTS) throw error;
      }
    }
  }

  /** Polls `SELECT ... FOR UPDATE NOWAIT` until the lock is granted (true) or `lockTimeoutMs` has passed (false). */
  private async lockRow(runner: QueryRunner, key: string): Promise<boolean> {
    const deadline = performance.now() + this.db.lockTimeoutMs;
    for (let pause = 5; ; pause = Math.min(pause * 2, MAX_LOCK_POLL_MS)) {
      try {
        await this.db.run(runner, this.db.mysqlSql.lockRowNowait, [key]);
        return true;
      } catch (error) {
        if (!isMysqlLockNotAvailable(error)) throw error;
      }
      const left = deadline - performance.now();
      if (left <= 0) return false;
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
    }
  }

  /** The row as it is, expired or not, with the database's clock at the read. */
  private async read(runner: QueryRunner, key: string) {
    return recordWithClock((await this.db.run(runner, this.db.sql.select, [key])).records);
  }
}
