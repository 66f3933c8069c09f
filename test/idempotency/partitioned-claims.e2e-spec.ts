import { jest } from '@jest/globals';
import type pg from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import { IdempotencyConfigurationError, type DurableClaimTransaction } from 'nestjs-idempotency';
import {
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
  idempotencyTypeOrmEntities,
  TypeOrmIdempotencyStore,
} from 'nestjs-idempotency/typeorm';
import { claimRequest, newId, sampleResponse } from 'nestjs-idempotency/testing';
import {
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  TEST_DATABASE_URL,
} from '../support/servers/postgres.js';
import { sleep, waitUntil } from '../support/timing.js';

/**
 * The partitioned durable table (issue 30 item 3, model/durable-partitioned.pml) where the
 * contract suite cannot reach: claims across a partition's edge, a race of instances on one key,
 * a claim whose connection dies before its COMMIT, and the reaper against an uncommitted claim
 * and an extended record. Real PostgreSQL, the narrowest partitions (1 s).
 */
const PARTITION_MS = 1_000;
const LOCK_TIMEOUT_MS = 400;
/** Longer than any test here: a record that must stay live. */
const LIVE_MS = 60_000;

/** Sleeps until the next partition of the clock has begun (the database runs on this host). */
const untilNextPartition = () => sleep(PARTITION_MS - (Date.now() % PARTITION_MS) + 30);

describe('partitioned idempotency table (PostgreSQL)', () => {
  let schema: string;
  let dataSource: DataSource;
  const storeOn = (on: DataSource, lockTimeoutMs = LOCK_TIMEOUT_MS) =>
    new TypeOrmIdempotencyStore(on, { partitioning: { partitionMs: PARTITION_MS }, lockTimeoutMs });
  const store = () => storeOn(dataSource);
  const openDataSource = () =>
    new DataSource({
      type: 'postgres',
      url: TEST_DATABASE_URL,
      schema,
      extra: { options: `-c search_path=${schema}` },
      entities: IDEMPOTENCY_TYPEORM_ENTITIES,
      migrations: IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
    }).initialize();
  /** The partition that holds the key's row, and how many rows the key has. */
  const rowsOf = async (key: string) =>
    (await dataSource.query('SELECT tableoid::regclass::text AS part FROM idempotency_records WHERE "key" = $1', [
      key,
    ])) as { part: string }[];
  const claimOpen = async (target: TypeOrmIdempotencyStore, key: string, ttlMs = LIVE_MS) => {
    const result = await target.claimInTransaction(key, claimRequest({ ttlMs }));
    if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
    return result.transaction;
  };
  const completeAndCommit = async (transaction: DurableClaimTransaction) => {
    expect(await transaction.complete(sampleResponse())).toBe(true);
    await transaction.commit();
  };
  /**
   * Runs `work` on the partitioned table in a schema of its own, named by the DataSource's
   * `schema` alone (no search path): the reaper meets only the partitions `work` makes.
   */
  const inOwnSchema = async (
    prefix: string,
    work: (on: DataSource, own: string) => Promise<void>,
    connectionOptions?: string,
  ) => {
    const own = await createThrowawaySchema(prefix);
    const on = await new DataSource({
      type: 'postgres',
      url: TEST_DATABASE_URL,
      schema: own,
      extra: connectionOptions ? { options: connectionOptions } : undefined,
      entities: IDEMPOTENCY_TYPEORM_ENTITIES,
      migrations: IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
    }).initialize();
    try {
      await on.runMigrations();
      await work(on, own);
    } finally {
      await on.destroy();
      await dropSchema(own);
    }
  };
  /** Whether a statement on schema `own` that contains `fragment` waits for a lock. */
  const waitsForLock = async (admin: pg.Client, own: string, fragment: string) =>
    Number(
      (
        await admin.query(
          "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1 AND query LIKE $2",
          [`%"${own}".%`, `%${fragment}%`],
        )
      ).rows[0].n,
    ) > 0;

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    schema = await createThrowawaySchema('partitioned_claims');
    dataSource = await openDataSource();
    await dataSource.runMigrations();
  });
  afterAll(async () => {
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  it('a record claimed in the previous partition is found across the edge: 12 claims from 3 instances answer existing', async () => {
    const key = newId();
    const first = await store().claim(key, claimRequest({ ttlMs: LIVE_MS }));
    expect(first.kind).toBe('claimed');
    const [before] = await rowsOf(key);
    await untilNextPartition();
    const instances = [store(), store(), store()];
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        i % 2 === 0
          ? instances[i % 3].claim(key, claimRequest())
          : instances[i % 3].claimInTransaction(key, claimRequest()),
      ),
    );
    expect(results.map((result) => result.kind)).toEqual(Array(12).fill('existing'));
    expect(await rowsOf(key)).toEqual([before]);
  });

  it('an uncommitted claim made before the edge holds the key after it: a duplicate answers busy, then existing once it commits', async () => {
    const key = newId();
    const transaction = await claimOpen(store(), key);
    await untilNextPartition();
    expect((await store().claimInTransaction(key, claimRequest())).kind).toBe('busy');
    await completeAndCommit(transaction);
    const replay = await store().claimInTransaction(key, claimRequest());
    expect(replay.kind).toBe('existing');
    if (replay.kind === 'existing') expect(replay.record.state).toBe('completed');
    expect(await rowsOf(key)).toHaveLength(1);
  });

  it('20 concurrent claims of a new key from 3 instances (plain and in a transaction): exactly one is granted', async () => {
    const key = newId();
    const instances = [store(), store(), store()];
    const results = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        if (i % 2 === 0) return (await instances[i % 3].claim(key, claimRequest())).kind;
        const result = await instances[i % 3].claimInTransaction(key, claimRequest());
        if (result.kind === 'claimed') await completeAndCommit(result.transaction);
        return result.kind;
      }),
    );
    expect(results.filter((kind) => kind === 'claimed')).toHaveLength(1);
    expect(results.every((kind) => ['claimed', 'existing', 'busy'].includes(kind))).toBe(true);
    expect(await rowsOf(key)).toHaveLength(1);
  });

  it('a claim whose process dies before its COMMIT leaves nothing behind: the retry claims at once, fencing token 1', async () => {
    const key = newId();
    // The dying instance: a DataSource (a pool) of its own, its claim's session killed.
    const dying = await openDataSource();
    const transaction = await claimOpen(storeOn(dying), key);
    const admin = await connectPostgresOrFail();
    try {
      const killed = await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE state LIKE 'idle in transaction%' AND query LIKE $1`,
        [`%"${schema}"."idempotency_records_claim"%`],
      );
      expect(killed.rowCount).toBe(1);
    } finally {
      await admin.end();
    }
    await transaction.rollback();
    await dying.destroy();
    const retry = await store().claim(key, claimRequest());
    expect(retry.kind).toBe('claimed');
    if (retry.kind === 'claimed') expect(retry.record.fencingToken).toBe(1);
  });

  it('an expired record in the previous partition is replaced in the current one, its fencing token carried forward', async () => {
    const key = newId();
    await store().claim(key, claimRequest({ ttlMs: 100 }));
    const [before] = await rowsOf(key);
    await untilNextPartition();
    const again = await store().claim(key, claimRequest({ ttlMs: LIVE_MS }));
    expect(again.kind).toBe('claimed');
    if (again.kind === 'claimed') expect(again.record.fencingToken).toBe(2);
    const after = await rowsOf(key);
    expect(after).toHaveLength(1);
    expect(after[0].part).not.toBe(before.part);
  });

  it('the reaper keeps a past partition while an uncommitted claim in it is open (it waits for its writers), and the claim stays exclusive once committed', async () => {
    const key = newId();
    const transaction = await claimOpen(store(), key);
    await untilNextPartition();
    await sleep(1_100); // past the drop's grace after the partition's end
    expect(await store().deleteExpired(100)).toBe(0);
    await completeAndCommit(transaction);
    expect(await store().deleteExpired(100)).toBe(0);
    expect((await store().claim(key, claimRequest())).kind).toBe('existing');
  });

  it('a record extended past the end of its partition outlives the drop of older ones: a new claim of its key answers existing', async () => {
    const key = newId();
    const claimed = await store().claim(key, claimRequest({ ttlMs: 100, leaseMs: 100 }));
    expect(await store().extend(key, claimed.record.ownerToken, LIVE_MS)).toBe(true);
    await untilNextPartition();
    await sleep(1_100);
    await store().deleteExpired(100);
    expect((await store().claim(key, claimRequest())).kind).toBe('existing');
    expect(await rowsOf(key)).toHaveLength(1);
  });

  it('a past partition left detached by a reaper that died between its DETACH and its DROP is dropped by the next run, its rows counted; a table of the present is not', async () => {
    await inOwnSchema('partitioned_leftover', async (on, own) => {
      const reaper = storeOn(on);
      await reaper.claim(newId(), claimRequest({ ttlMs: 100, leaseMs: 100 }));
      await reaper.claim(newId(), claimRequest({ ttlMs: 100, leaseMs: 100 }));
      const [{ part }] = (await on.query(
        `SELECT tableoid::regclass::text AS part FROM "${own}".idempotency_records LIMIT 1`,
      )) as { part: string }[];
      await untilNextPartition();
      await sleep(1_100); // past the drop's grace after the partition's end
      // The dead reaper's DETACH went through; its DROP never ran.
      await on.query(`ALTER TABLE "${own}".idempotency_records DETACH PARTITION ${part}`);
      // A table waiting for its ATTACH, covering the present: not a leftover.
      const present = Math.floor(Date.now() / PARTITION_MS) * PARTITION_MS + 100 * PARTITION_MS;
      await on.query(
        `CREATE TABLE "${own}".idempotency_records_p${present} (LIKE "${own}".idempotency_records INCLUDING DEFAULTS)`,
      );
      await on.query(
        `ALTER TABLE "${own}".idempotency_records_p${present} ADD CONSTRAINT idempotency_records_p${present}_range ` +
          `CHECK (created_at_ms >= ${present} AND created_at_ms < ${present + PARTITION_MS})`,
      );
      const tables = async () =>
        (
          (await on.query(
            `SELECT relname FROM pg_class WHERE relnamespace = CAST($1 AS regnamespace) AND relname LIKE 'idempotency_records_p%' AND relkind = 'r'`,
            [own],
          )) as { relname: string }[]
        ).map((row) => row.relname);
      const leftover = part.replace(/^.*\./, '').replaceAll('"', '');
      expect(await tables()).toContain(leftover);
      expect(await reaper.deleteExpired(100)).toBe(2);
      expect(await tables()).not.toContain(leftover);
      expect(await tables()).toContain(`idempotency_records_p${present}`);
    });
  });

  it('a claim that read the clock in a partition and then waited for a lock before its insert does not land in that partition after the reaper checked it (its record would be dropped)', async () => {
    await inOwnSchema('partitioned_drop_race', async (on, own) => {
      const [holder, queued, admin] = [
        await connectPostgresOrFail(),
        await connectPostgresOrFail(),
        await connectPostgresOrFail(),
      ];
      const parent = `"${own}"."idempotency_records"`;
      const waitingOn = (fragment: string) =>
        waitUntil(() => waitsForLock(admin, own, fragment), 10_000, `a statement with ${fragment} waits for a lock`);
      try {
        // Lock waits longer than this test's: neither the claim nor the detach gives up.
        const slow = storeOn(on, 20_000);
        expect((await slow.claim(newId(), claimRequest({ ttlMs: LIVE_MS }))).kind).toBe('claimed');
        // The partitions of the next seconds exist: no ATTACH waits behind the locks below.
        const [{ now_ms }] = (await on.query(
          'SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms',
        )) as { now_ms: string }[];
        const first = Math.floor(Number(now_ms) / PARTITION_MS) * PARTITION_MS;
        for (let from = first + 3 * PARTITION_MS; from < first + 12 * PARTITION_MS; from += PARTITION_MS) {
          await on.query(
            `CREATE TABLE "${own}"."idempotency_records_p${from}" PARTITION OF ${parent} FOR VALUES FROM (${from}) TO (${from + PARTITION_MS})`,
          );
        }
        await untilNextPartition();
        // The claim reads the clock in this partition, then its DELETE waits for the parent.
        await holder.query('BEGIN');
        await holder.query(`LOCK TABLE ONLY ${parent} IN SHARE MODE`);
        const key = newId();
        const claiming = slow.claim(key, claimRequest({ ttlMs: LIVE_MS }));
        await waitingOn('idempotency_records_claim');
        await sleep(2 * PARTITION_MS + 300); // the partition ended, and the drop's grace after it
        // Queued behind the claim: it lets the claim through and holds the reaper's DETACH back.
        await queued.query('BEGIN');
        const queuedLock = queued.query(`LOCK TABLE ONLY ${parent} IN SHARE UPDATE EXCLUSIVE MODE`);
        await waitingOn('IN SHARE UPDATE EXCLUSIVE MODE');
        const reaping = slow.deleteExpired(100);
        await waitingOn('DETACH PARTITION');
        await holder.query('COMMIT');
        const claimed = await claiming;
        expect(claimed.kind).toBe('claimed');
        await queuedLock;
        await queued.query('COMMIT');
        await reaping;
        expect((await slow.get(key))?.ownerToken).toBe(claimed.record.ownerToken);
        expect((await slow.claim(key, claimRequest())).kind).toBe('existing');
      } finally {
        await holder.query('ROLLBACK').catch(() => undefined);
        await queued.query('ROLLBACK').catch(() => undefined);
        await Promise.all([holder.end(), queued.end(), admin.end()]);
      }
    });
  });

  it("a claim in a route's transaction on a host whose clock runs behind the database's, once no partition covers the database's clock, creates them and claims", async () => {
    // A schema of its own: no other store here creates the partitions this one misses.
    await inOwnSchema('partitioned_lagging_host', async (on) => {
      const realNow = Date.now.bind(Date);
      const lagging = jest.spyOn(Date, 'now').mockImplementation(() => realNow() - 5 * PARTITION_MS);
      try {
        const laggingHost = storeOn(on);
        await completeAndCommit(await claimOpen(laggingHost, newId()));
        // Past the three partitions made ahead by the database's clock; this host's is 5 s behind.
        await sleep(3 * PARTITION_MS + 100);
        await completeAndCommit(await claimOpen(laggingHost, newId()));
      } finally {
        lagging.mockRestore();
      }
    });
  });

  it("the claim function keeps the caller's lock_timeout when one transaction calls it twice (a route's claim that found the key live, then found it gone, and tries again)", async () => {
    const live = newId();
    expect((await store().claim(live, claimRequest({ ttlMs: LIVE_MS }))).kind).toBe('claimed');
    const claimFunction = `"${schema}"."idempotency_records_claim"`;
    const callClaim = (manager: EntityManager, key: string) =>
      manager.query(
        `SELECT owner_token FROM ${claimFunction}($1, 'fingerprint', $2, 1000, ${LIVE_MS}, ${LOCK_TIMEOUT_MS})`,
        [key, newId()],
      ) as Promise<unknown[]>;
    await dataSource.transaction(async (manager) => {
      await manager.query("SET LOCAL lock_timeout = '7s'");
      expect(await callClaim(manager, live)).toHaveLength(0);
      expect(await callClaim(manager, newId())).toHaveLength(1);
      // What the route's savepoint() runs before its handler (restoreLockTimeout).
      await manager.query("SELECT set_config('lock_timeout', current_setting('idempotency.saved_lock_timeout'), true)");
      expect(await manager.query('SHOW lock_timeout')).toEqual([{ lock_timeout: '7s' }]);
    });
  });

  it("the reaper does not queue for a past partition that still holds a live row, so claims of new keys do not wait behind it for a route's open transaction", async () => {
    await inOwnSchema('partitioned_reaper_queue', async (on, own) => {
      const admin = await connectPostgresOrFail();
      let open: DurableClaimTransaction | undefined;
      try {
        // The reaper's instance waits longer for locks than the claiming one.
        const reaper = storeOn(on, 5_000);
        expect((await reaper.claim(newId(), claimRequest({ ttlMs: LIVE_MS }))).kind).toBe('claimed');
        await untilNextPartition();
        await sleep(PARTITION_MS + 100); // the live row's partition ended over a second ago
        // A route's transaction at work: its claim's DELETE holds every attached partition.
        open = await claimOpen(storeOn(on), newId());
        let reaped = false;
        const reaping = reaper.deleteExpired(100).finally(() => (reaped = true));
        await waitUntil(
          async () => reaped || (await waitsForLock(admin, own, 'IN SHARE MODE')),
          10_000,
          'the reaper is done or waits for its lock',
        );
        const next = await storeOn(on).claimInTransaction(newId(), claimRequest());
        expect(next.kind).toBe('claimed');
        if (next.kind === 'claimed') await completeAndCommit(next.transaction);
        await completeAndCommit(open);
        open = undefined;
        expect(await reaping).toBe(0);
      } finally {
        await open?.rollback();
        await admin.end();
      }
    });
  });

  it("on a server whose default isolation is REPEATABLE READ, a claim refuses to run (its read after the key's lock would miss a claim committed meanwhile, and grant the key twice)", async () => {
    await inOwnSchema(
      'partitioned_server_rr',
      async (on, own) => {
        const admin = await connectPostgresOrFail();
        const key = newId();
        const twoClaims = async () => {
          const first = await claimOpen(storeOn(on, 5_000), key);
          const second = storeOn(on, 5_000).claim(key, claimRequest());
          await waitUntil(
            () => waitsForLock(admin, own, 'idempotency_records_claim'),
            10_000,
            'the second claim waits for the key',
          );
          await completeAndCommit(first);
          return (await second).kind;
        };
        try {
          await expect(twoClaims()).rejects.toThrow(/claims at READ COMMITTED, this transaction is REPEATABLE READ/);
        } finally {
          await admin.end();
        }
      },
      '-c default_transaction_isolation=repeatable\\ read',
    );
  });

  it("a claim goes through while the partitions ahead cannot be attached (a lock on the table, as ANALYZE's, outlasts the lock timeout): the current partition exists", async () => {
    await inOwnSchema('partitioned_attach_waits', async (on, own) => {
      const analyze = await connectPostgresOrFail();
      try {
        expect((await storeOn(on).claim(newId(), claimRequest())).kind).toBe('claimed');
        await untilNextPartition();
        // What ANALYZE of the table holds: ATTACH PARTITION waits for it.
        await analyze.query('BEGIN');
        await analyze.query(`LOCK TABLE ONLY "${own}"."idempotency_records" IN SHARE UPDATE EXCLUSIVE MODE`);
        // A new instance: its first claim creates the partition after the last one made ahead.
        expect((await storeOn(on).claim(newId(), claimRequest())).kind).toBe('claimed');
        await completeAndCommit(await claimOpen(storeOn(on), newId()));
      } finally {
        await analyze.query('ROLLBACK').catch(() => undefined);
        await analyze.end();
      }
    });
  });

  it('the migration reverts: the table with its partitions and records, and the claim function', async () => {
    await inOwnSchema('partitioned_revert', async (on, own) => {
      expect((await storeOn(on).claim(newId(), claimRequest())).kind).toBe('claimed');
      await on.undoLastMigration();
      const [left] = (await on.query(
        `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = $1 AND c.relname LIKE 'idempotency_records%') AS tables,
                (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                  WHERE n.nspname = $1) AS functions`,
        [own],
      )) as { tables: string; functions: string }[];
      expect(left).toEqual({ tables: '0', functions: '0' });
    });
  });

  it('refuses what the partitioned table cannot do (sql.js, a partition under 1 s, a route above READ COMMITTED), and a store without the option says what it lacks', async () => {
    const sqljs = new DataSource({ type: 'sqljs', entities: idempotencyTypeOrmEntities('sqljs') });
    expect(() => new TypeOrmIdempotencyStore(sqljs, { partitioning: { partitionMs: PARTITION_MS } })).toThrow(
      IdempotencyConfigurationError,
    );
    expect(() => new TypeOrmIdempotencyStore(dataSource, { partitioning: { partitionMs: 999 } })).toThrow(RangeError);
    await expect(
      store().claimInTransaction(newId(), claimRequest(), { isolationLevel: 'REPEATABLE READ' }),
    ).rejects.toThrow(IdempotencyConfigurationError);
    await expect(new TypeOrmIdempotencyStore(dataSource).claim(newId(), claimRequest())).rejects.toThrow(
      /give the store its partitioning option/,
    );
  });
});
