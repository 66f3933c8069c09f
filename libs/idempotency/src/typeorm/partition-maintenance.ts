/**
 * The partitions of the opt-in partitioned durable table: created ahead of the clock, and dropped
 * whole once every row in them has expired, in place of deleting expired rows one by one
 * (@internal). Safe across instances: creation runs under a transaction-scoped advisory lock,
 * dropping under a session-scoped try-lock that one instance at a time gets.
 */
import type { QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { checkDuration } from '../stores/store-arguments.js';
import { IDEMPOTENCY_RECORDS_TABLE } from './idempotency-record.entity.js';
import type { IdempotencyRecordsConnection } from './idempotency-records.connection.js';
import { LOCK_NOT_AVAILABLE, sqlState } from './idempotency-records.sql.js';
import type { PartitionedNames } from './partitioned-records.sql.js';
import type { IdempotencyPartitioning } from './typeorm-idempotency-store.options.js';
import { rollbackQuietly } from './query-runners.js';

/** The narrowest partition: below it, the drop's grace and the creation ahead would dominate. */
const MIN_PARTITION_MS = 1_000;
/** Partitions kept ready: the current one and the next two. */
const PARTITIONS_AHEAD = 3;
/**
 * How long past its last expiry a partition is kept before it is dropped. It covers a writer
 * whose statement began (and read the clock) before the drop's check but reached the partition
 * after it (docs/capacity.md, "The partitioned table").
 */
export const DROP_GRACE_MS = 1_000;
/** Seeds of the advisory locks' key hashes, apart from the claim function's (7236150000). */
const CREATE_LOCK_SEED = 7236150001;
const DROP_LOCK_SEED = 7236150002;
const DATABASE_NOW_MS = '(floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint';

/** One attached (or detaching) partition and its range of `created_at_ms`. */
interface Partition {
  readonly name: string;
  readonly from: number;
  readonly to: number;
  readonly detaching: boolean;
}

/** @internal */
export class PartitionMaintenance {
  /** End of the last partition known to exist, by the database's clock. */
  private horizonMs = 0;
  /** The creation under way: claims that meet the horizon together wait for one. */
  private creating?: Promise<void>;

  constructor(
    private readonly db: IdempotencyRecordsConnection,
    private readonly names: () => PartitionedNames,
    readonly partitionMs: number,
  ) {}

  /**
   * Before a claim: creates the partitions ahead once this host's clock comes within one
   * partition of the horizon (a claim's row goes in the partition of the database's clock).
   */
  async ensureAhead(force = false): Promise<void> {
    if (!force && Date.now() + this.partitionMs < this.horizonMs) return;
    this.creating ??= this.db
      .operation('partition maintenance', (runner) => this.createAhead(runner))
      .then((horizon) => void (this.horizonMs = horizon))
      .finally(() => (this.creating = undefined));
    if (force) return this.creating;
    // Ahead of need, a failure (ATTACH waiting behind ANALYZE) must not fail the claim: its row's
    // partition exists, or its insert finds none and forces the creation, which reports it.
    await this.creating.catch(() => undefined);
  }

  /**
   * Drops every past partition whose rows all expired at least {@link DROP_GRACE_MS} ago (by
   * `nowMs`, or the database's clock), and creates the ones ahead. Resolves with the rows dropped;
   * 0 when another instance is dropping.
   */
  dropExpired(nowMs: number | undefined): Promise<number> {
    return this.db.operation('deleteExpired', async (runner) => {
      this.horizonMs = await this.createAhead(runner);
      const { table } = this.names();
      const [{ locked }] = (await runner.query(
        `SELECT pg_try_advisory_lock(hashtextextended($1, ${DROP_LOCK_SEED})) AS locked`,
        [table],
      )) as { locked: boolean }[];
      if (!locked) return 0;
      try {
        return await this.dropPast(runner, nowMs);
      } finally {
        await runner.query(`SELECT pg_advisory_unlock(hashtextextended($1, ${DROP_LOCK_SEED}))`, [table]);
      }
    });
  }

  private async dropPast(runner: QueryRunner, nowMs: number | undefined): Promise<number> {
    const { table } = this.names();
    let dropped = await this.dropLeftovers(runner, nowMs);
    // A pending detach first: PostgreSQL refuses another one on the table until it is finished.
    const partitions = (await this.partitions(runner)).sort((a, b) => Number(b.detaching) - Number(a.detaching));
    for (const partition of partitions) {
      const name = this.qualified(partition.name);
      // A detach cut short between its two transactions (its check passed) is finished first.
      if (!partition.detaching && !(await this.allExpired(runner, partition, nowMs))) continue;
      // CONCURRENTLY: claims keep running; it waits for the transactions that may still see the partition.
      const detach = `ALTER TABLE ${table} DETACH PARTITION ${name} ${partition.detaching ? 'FINALIZE' : 'CONCURRENTLY'}`;
      // PostgreSQL lets one detach be pending per table: the next call finishes it first.
      if (!(await this.withLockTimeout(runner, detach))) break;
      // Counted once detached: nothing waits for this scan (under the check's SHARE lock, every
      // claim's DELETE would, for as long as it reads the whole partition).
      const [{ n }] = (await runner.query(`SELECT count(*) AS n FROM ${name}`)) as { n: string }[];
      await runner.query(`DROP TABLE ${name}`);
      dropped += Number(n);
    }
    return dropped;
  }

  /**
   * Drops the tables of past ranges left detached by a reaper that died between its DETACH and
   * its DROP (nothing reads them, nothing else drops them). Only the reaper detaches, and only a
   * partition whose rows had all expired; a table still waiting for its ATTACH (`create`) covers
   * the present or the future, so a range that ended before the drop's grace is a leftover.
   */
  private async dropLeftovers(runner: QueryRunner, nowMs: number | undefined): Promise<number> {
    const rows = (await runner.query(
      `SELECT c.relname AS name, pg_get_constraintdef(k.oid) AS range,
              COALESCE(CAST($2 AS BIGINT), ${DATABASE_NOW_MS}) AS now_ms
         FROM pg_class c JOIN pg_constraint k ON k.conrelid = c.oid AND k.conname = c.relname || '_range'
        WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = CAST($1 AS regclass))
          AND c.relkind = 'r' AND NOT c.relispartition AND c.relname ~ $3`,
      [this.names().table, nowMs ?? null, `^${IDEMPOTENCY_RECORDS_TABLE}_p-?[0-9]+$`],
    )) as { name: string; range: string; now_ms: string }[];
    let dropped = 0;
    for (const row of rows) {
      const end = /created_at_ms < '?(-?\d+)/.exec(row.range);
      if (!end || Number(end[1]) > Number(row.now_ms) - DROP_GRACE_MS) continue;
      const name = this.qualified(row.name);
      const [{ n }] = (await runner.query(`SELECT count(*) AS n FROM ${name}`)) as { n: string }[];
      await runner.query(`DROP TABLE ${name}`);
      dropped += Number(n);
    }
    return dropped;
  }

  /**
   * Whether a past partition's rows have all expired (false: keep it). The SHARE lock waits for
   * the transactions writing to it (a route's uncommitted claim, a renewal inside
   * `transaction()`) and keeps new writers out while it reads the last expiry, one probe of its
   * expiry index: every claim's DELETE waits for that lock.
   */
  private async allExpired(runner: QueryRunner, partition: Partition, nowMs: number | undefined): Promise<boolean> {
    await runner.startTransaction();
    try {
      await runner.query(`SET LOCAL lock_timeout = '${this.db.lockTimeoutMs}ms'`);
      const [{ now_ms }] = (await runner.query(`SELECT COALESCE(CAST($1 AS BIGINT), ${DATABASE_NOW_MS}) AS now_ms`, [
        nowMs ?? null,
      ])) as { now_ms: string }[];
      const now = Number(now_ms);
      // The grace after the range's end too: a claim's clock read just before it, inserting just after.
      if (partition.to > now - DROP_GRACE_MS) {
        await runner.rollbackTransaction();
        return false;
      }
      const name = this.qualified(partition.name);
      const allExpiredNow = async () => {
        const [{ last }] = (await runner.query(`SELECT COALESCE(max(expires_at_ms), 0) AS last FROM ${name}`)) as {
          last: string;
        }[];
        return Number(last) <= now - DROP_GRACE_MS;
      };
      // A committed live row keeps it without the lock: every claim's DELETE holds every
      // partition, and would queue behind the SHARE lock while it waits for a route's transaction.
      let expired = await allExpiredNow();
      if (expired) {
        await runner.query(`LOCK TABLE ${name} IN SHARE MODE`);
        expired = await allExpiredNow();
      }
      await runner.commitTransaction();
      return expired;
    } catch (error) {
      await rollbackQuietly(runner);
      // A writer held the partition longer than lockTimeoutMs: it is kept, and tried next time.
      if (sqlState(error) === LOCK_NOT_AVAILABLE) return false;
      throw error;
    }
  }

  /** Creates the missing partitions of the next {@link PARTITIONS_AHEAD} widths; resolves with the horizon. */
  private async createAhead(runner: QueryRunner): Promise<number> {
    const { table } = this.names();
    await runner.startTransaction();
    try {
      await runner.query(`SET LOCAL lock_timeout = '${this.db.lockTimeoutMs}ms'`);
      const [{ now_ms }] = (await runner.query(
        `SELECT pg_advisory_xact_lock(hashtextextended($1, ${CREATE_LOCK_SEED})), ${DATABASE_NOW_MS} AS now_ms`,
        [table],
      )) as { now_ms: string }[];
      const existing = await this.partitions(runner);
      const first = Math.floor(Number(now_ms) / this.partitionMs) * this.partitionMs;
      let horizon = 0;
      for (let from = first; from < first + PARTITIONS_AHEAD * this.partitionMs; from += this.partitionMs) {
        const range = freeRange(existing, from, from + this.partitionMs);
        if (range) await this.create(runner, range.from, range.to);
        horizon = from + this.partitionMs;
      }
      await runner.commitTransaction();
      return horizon;
    } catch (error) {
      await rollbackQuietly(runner);
      if (error instanceof IdempotencyStoreError) throw error;
      throw this.db.failure('partition maintenance', error);
    }
  }

  /**
   * A table of its own with the range as a CHECK constraint, then ATTACH: it takes a SHARE UPDATE
   * EXCLUSIVE lock on the parent, which running claims do not conflict with (CREATE TABLE ...
   * PARTITION OF would wait for every open transaction on the table and block claims meanwhile).
   */
  private async create(runner: QueryRunner, from: number, to: number): Promise<void> {
    const { table } = this.names();
    const bare = `${IDEMPOTENCY_RECORDS_TABLE}_p${from}`;
    const name = this.qualified(bare);
    await runner.query(`CREATE TABLE ${name} (LIKE ${table} INCLUDING DEFAULTS)`);
    await runner.query(
      `ALTER TABLE ${name} ADD CONSTRAINT "${bare}_range" CHECK (created_at_ms >= ${from} AND created_at_ms < ${to})`,
    );
    await runner.query(`ALTER TABLE ${table} ATTACH PARTITION ${name} FOR VALUES FROM (${from}) TO (${to})`);
  }

  /** The table's partitions, oldest first. */
  private async partitions(runner: QueryRunner): Promise<Partition[]> {
    const rows = (await runner.query(
      `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound, i.inhdetachpending AS detaching
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = CAST($1 AS regclass)`,
      [this.names().table],
    )) as { name: string; bound: string; detaching: boolean }[];
    return rows
      .map((row) => {
        const range = /FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)/.exec(row.bound);
        if (!range) throw new Error(`partition ${row.name} has a bound the store does not read: ${row.bound}`);
        return { name: row.name, from: Number(range[1]), to: Number(range[2]), detaching: row.detaching };
      })
      .sort((a, b) => a.from - b.from);
  }

  private qualified(partition: string): string {
    const { schema } = this.names();
    return schema ? `${schema}."${partition}"` : `"${partition}"`;
  }

  /**
   * DETACH with the store's lock timeout for its lock waits, on a connection outside any
   * transaction; false when a wait timed out (a long transaction still sees the partition: the
   * next call finishes the detach).
   */
  private async withLockTimeout(runner: QueryRunner, sql: string): Promise<boolean> {
    await runner.query(`SET lock_timeout = '${this.db.lockTimeoutMs}ms'`);
    try {
      await runner.query(sql);
      return true;
    } catch (error) {
      if (sqlState(error) === LOCK_NOT_AVAILABLE) return false;
      throw error;
    } finally {
      await runner.query('RESET lock_timeout');
    }
  }
}

/** The part of [from, to) no existing partition covers (its lower end), or undefined. */
function freeRange(existing: readonly Partition[], from: number, to: number): { from: number; to: number } | undefined {
  let start = from;
  let end = to;
  for (const partition of existing) {
    if (partition.from <= start && partition.to > start) start = partition.to;
    if (partition.from > start && partition.from < end) end = partition.from;
  }
  return start < end ? { from: start, to: end } : undefined;
}

/** The `partitionMs` of a valid `partitioning` option, or undefined without one. */
export function checkPartitioning(
  partitioning: IdempotencyPartitioning | undefined,
  dialect: string,
): number | undefined {
  if (partitioning === undefined) return undefined;
  if (dialect !== 'postgres') {
    throw new IdempotencyConfigurationError('partitioning is for PostgreSQL: the table is partitioned by range');
  }
  checkDuration('partitioning.partitionMs', partitioning?.partitionMs);
  if (partitioning.partitionMs < MIN_PARTITION_MS) {
    throw new RangeError(
      `partitioning.partitionMs must be at least ${MIN_PARTITION_MS} ms, got ${partitioning.partitionMs}`,
    );
  }
  return partitioning.partitionMs;
}

/**
 * Partitioned: the claim's read after its lock must see the claims committed before the lock was
 * granted, which a REPEATABLE READ or SERIALIZABLE snapshot, taken before the wait, does not.
 */
export function checkPartitionedIsolation(level: string | undefined): void {
  if (level === undefined || level === 'READ COMMITTED' || level === 'READ UNCOMMITTED') return;
  throw new IdempotencyConfigurationError(
    `The partitioned idempotency table claims at READ COMMITTED; a route's transaction at ${level} would not see ` +
      'a claim of its key committed while it waited for the lock. Use the default table for such routes.',
  );
}
