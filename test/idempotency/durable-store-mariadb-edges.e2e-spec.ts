import { DataSource, type EntityManager } from 'typeorm';
import { IdempotencyStoreError } from 'nestjs-idempotency';
import { MysqlIdempotencyRecordEntity, TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { claimRequest, newId, sampleResponse } from 'nestjs-idempotency/testing';
import { openMariadbIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
import {
  connectMariadbOrFail,
  mariadbUrl,
  createMariadbDatabase,
  dropMariadbDatabase,
  queryMariadb,
} from '../support/servers/mariadb.js';
import { sleep } from '../support/timing.js';

/**
 * The TypeORM store on MariaDB where InnoDB and MySQL's SQL differ from PostgreSQL: PAD SPACE
 * comparisons, the session's time zone, session state left on pooled connections, a connection
 * killed in the middle of a route's transaction, the deadlocks InnoDB's index locks make between
 * takeovers, completions, reapers and claims replacing an expired row, and a `text` column's size.
 */
describe('TypeOrmIdempotencyStore on MariaDB: where MySQL differs from PostgreSQL', () => {
  let database: string;
  let dataSource: DataSource;

  beforeAll(async () => {
    await (await connectMariadbOrFail()).end();
    database = await createMariadbDatabase('edges');
    dataSource = await openMariadbIdempotencyDataSource(database);
    await dataSource.query('CREATE TABLE business_rows (id varchar(64) PRIMARY KEY)');
  });

  afterAll(async () => {
    await dataSource?.destroy();
    if (database) await dropMariadbDatabase(database);
  });

  /** The session variables of every connection the pool holds, read on each of them. */
  const pooledSessions = async (source: DataSource, size: number) => {
    const runners = Array.from({ length: size }, () => source.createQueryRunner());
    try {
      return await Promise.all(
        runners.map(
          async (runner) =>
            (
              (await runner.query(
                'SELECT @@SESSION.innodb_lock_wait_timeout AS wait, @@SESSION.tx_isolation AS isolation, @@in_transaction AS open',
              )) as { wait: number; isolation: string; open: number }[]
            )[0],
        ),
      );
    } finally {
      await Promise.all(runners.map((runner) => runner.release()));
    }
  };

  /** Until a statement of `key` runs in this suite's database (a duplicate's INSERT waiting on an uncommitted row). */
  const waitForStatementOf = async (key: string) => {
    for (;;) {
      const [{ running }] = await queryMariadb<{ running: number }>(
        "SELECT COUNT(*) AS running FROM information_schema.PROCESSLIST WHERE DB = ? AND COMMAND = 'Query' " +
          "AND INFO LIKE CONCAT('INSERT INTO%', ?, '%')",
        [database, key],
      );
      if (Number(running) > 0) return;
      await sleep(20);
    }
  };

  it('keys and owner tokens that differ only by trailing spaces are refused, never merged (PAD SPACE collation)', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource);
    const key = newId();
    const claimed = await store.claim(key, claimRequest());
    if (claimed.kind !== 'claimed') throw new Error(`expected claimed, got ${claimed.kind}`);
    // 'k' = 'k ' under ascii_bin: accepted, the other key would be answered with this one's record.
    await expect(store.claim(`${key} `, claimRequest())).rejects.toThrow(TypeError);
    await expect(store.get(`${key} `)).rejects.toThrow(TypeError);
    // A stale owner whose token differs by a trailing space must not complete the claim.
    await expect(store.complete(key, `${claimed.record.ownerToken} `, sampleResponse())).rejects.toThrow(TypeError);
    await expect(store.claim(newId(), claimRequest({ ownerToken: 'tøken' }))).rejects.toThrow(TypeError);
    expect((await store.get(key))?.state).toBe('in_progress');
  });

  it("takes the database's clock in UTC whatever the session's time_zone", async () => {
    const zoned = await openMariadbIdempotencyDataSource(database, { poolSize: 1 });
    try {
      await zoned.query("SET time_zone = '+09:30'");
      const [{ zone }] = (await zoned.query('SELECT @@SESSION.time_zone AS zone')) as { zone: string }[];
      expect(zone).toBe('+09:30');
      const [{ utc }] = (await zoned.query(
        "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS utc",
      )) as { utc: string }[];
      const store = new TypeOrmIdempotencyStore(zoned);
      const claimed = await store.claim(newId(), claimRequest());
      if (claimed.kind !== 'claimed') throw new Error(`expected claimed, got ${claimed.kind}`);
      // Same server, one connection: the claim's clock is the UTC one read just before, not 9.5 h off.
      expect(claimed.record.createdAtMs).toBeGreaterThanOrEqual(Number(utc));
      expect(claimed.record.createdAtMs - Number(utc)).toBeLessThan(9 * 3_600_000);
    } finally {
      await zoned.destroy();
    }
  });

  it('leaves no lock wait, isolation level or open transaction on pooled connections after busy, existing and failed claims', async () => {
    const pooled = await openMariadbIdempotencyDataSource(database, { poolSize: 3 });
    try {
      const before = await pooledSessions(pooled, 3);
      const store = new TypeOrmIdempotencyStore(pooled, { lockTimeoutMs: 1_000 });
      const key = newId();
      const first = await store.claimInTransaction(key, claimRequest(), { isolationLevel: 'READ COMMITTED' });
      if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
      expect((await store.claimInTransaction(key, claimRequest(), { isolationLevel: 'SERIALIZABLE' })).kind).toBe(
        'busy',
      );
      // A plain claim meeting the uncommitted claim: its INSERT's lock wait elapses.
      await expect(store.claim(key, claimRequest())).rejects.toThrow(IdempotencyStoreError);
      await first.transaction.savepoint();
      expect(await first.transaction.complete(sampleResponse())).toBe(true);
      await first.transaction.commit();
      expect((await store.claimInTransaction(key, claimRequest())).kind).toBe('existing');
      expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
      expect((await store.claim(key, claimRequest())).kind).toBe('existing');
      expect(await pooledSessions(pooled, 3)).toEqual(before);
    } finally {
      await pooled.destroy();
    }
  });

  it("a plain claim waits for a transactional route's uncommitted claim at most lockTimeoutMs, then fails as a store error; the handler never runs twice", async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_000 });
    const key = newId();
    const first = await store.claimInTransaction(key, claimRequest());
    if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
    try {
      // Before the fix the INSERT waited for the server's innodb_lock_wait_timeout (50 s here).
      await expect(store.claim(key, claimRequest())).rejects.toThrow(/uncommitted claim of the key/);
    } finally {
      await first.transaction.rollback();
    }
    expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
  });

  it('a plain claim that waited for an uncommitted claim rolled back is stamped with the clock after its wait, not before', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 5_000 });
    const key = newId();
    const first = await store.claimInTransaction(key, claimRequest());
    if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
    const request = claimRequest();
    const waiting = store.claim(key, request);
    await waitForStatementOf(key);
    await sleep(20); // a clock visibly later than the waiting INSERT's start
    const [{ clock }] = await queryMariadb<{ clock: string }>(
      "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS clock",
    );
    await first.transaction.rollback();
    const claimed = await waiting;
    if (claimed.kind !== 'claimed') throw new Error(`expected claimed, got ${claimed.kind}`);
    // The database's clock read while the claim was waiting: the lease starts after it.
    expect(claimed.record.createdAtMs).toBeGreaterThanOrEqual(Number(clock));
    expect(claimed.record.leaseExpiresAtMs).toBe(claimed.record.createdAtMs + request.leaseMs);
    expect(claimed.record.expiresAtMs).toBe(claimed.record.createdAtMs + request.ttlMs);
    expect(await store.get(key)).toEqual(claimed.record);
  });

  it('synchronize: true with MysqlIdempotencyRecordEntity creates the columns the migration creates (ascii_bin, no PAD SPACE merge)', async () => {
    const synchronizedDatabase = await createMariadbDatabase('sync');
    const synchronized = await new DataSource({
      type: 'mariadb',
      url: mariadbUrl(synchronizedDatabase),
      entities: [MysqlIdempotencyRecordEntity],
      synchronize: true,
    }).initialize();
    try {
      const columns = (schema: string) =>
        queryMariadb<{ name: string; charset: string | null; collation: string | null }>(
          // Types aside: the entity's boolean is `tinyint` where the migration's is `tinyint(1)`, a display width.
          'SELECT COLUMN_NAME AS name, CHARACTER_SET_NAME AS charset, COLLATION_NAME AS collation ' +
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'idempotency_records' ORDER BY COLUMN_NAME",
          [schema],
        );
      const migrated = await columns(database);
      expect(migrated.find((column) => column.name === 'key')?.collation).toBe('ascii_bin');
      expect(await columns(synchronizedDatabase)).toEqual(migrated);
    } finally {
      await synchronized.destroy();
      await dropMariadbDatabase(synchronizedDatabase);
    }
  });

  it('a route whose connection is killed mid-transaction commits nothing: no record, no write; the retry claims and runs', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource);
    const key = newId();
    const row = newId();
    const first = await store.claimInTransaction(key, claimRequest());
    if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
    await first.transaction.savepoint();
    const manager = first.transaction.manager as EntityManager;
    await manager.query('INSERT INTO business_rows (id) VALUES (?)', [row]);
    const [{ id }] = (await manager.query('SELECT CONNECTION_ID() AS id')) as { id: number }[];
    await queryMariadb(`KILL CONNECTION ${Number(id)}`);
    await expect(first.transaction.complete(sampleResponse())).rejects.toThrow();
    await first.transaction.rollback().catch(() => undefined);
    expect(await queryMariadb(`SELECT id FROM \`${database}\`.business_rows WHERE id = ?`, [row])).toHaveLength(0);
    expect(await store.get(key)).toBeUndefined();
    const retry = await store.claimInTransaction(key, claimRequest());
    expect(retry.kind).toBe('claimed');
    if (retry.kind === 'claimed') await retry.transaction.rollback();
  });

  it('owners racing takeovers and completions on one key: each fencing token is granted once, only the newest owner completes', async () => {
    // Four rounds: the deadlock of a takeover against a completion showed in about one round in three.
    for (let round = 0; round < 4; round += 1) {
      const key = newId();
      const granted: { fencingToken: number; ownerToken: string }[] = [];
      const completedBy: string[] = [];
      const worker = async () => {
        const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 200 });
        while (completedBy.length === 0) {
          const row = await store.get(key);
          if (row?.state === 'completed') return;
          const request = claimRequest({ leaseMs: 40 });
          const result = row ? await store.takeOver(key, row.ownerToken, request) : await store.claim(key, request);
          if (result.kind !== 'claimed') {
            await sleep(5);
            continue;
          }
          granted.push({ fencingToken: result.record.fencingToken, ownerToken: result.record.ownerToken });
          // Often past the 40 ms lease: another worker takes over meanwhile, and this one turns stale.
          await sleep(20 + Math.floor(Math.random() * 60));
          if (await store.complete(key, result.record.ownerToken, sampleResponse())) {
            completedBy.push(result.record.ownerToken);
          }
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));
      const tokens = granted.map((g) => g.fencingToken).sort((a, b) => a - b);
      expect(tokens).toEqual(tokens.map((_, index) => index + 1));
      expect(completedBy).toHaveLength(1);
      const [row] = (await dataSource.query(
        'SELECT owner_token AS owner, fencing_token AS fencing, state FROM idempotency_records WHERE `key` = ?',
        [key],
      )) as { owner: string; fencing: number; state: string }[];
      expect(row).toEqual({ owner: completedBy[0], fencing: tokens.length, state: 'completed' });
    }
  });

  it('reapers racing claims that replace expired rows: no error reaches a caller, each live claim keeps its row', async () => {
    const keys = Array.from({ length: 12 }, () => newId());
    const errors: unknown[] = [];
    const live: { key: string; ownerToken: string }[] = [];
    const until = performance.now() + 1_500;
    const claimer = async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 200 });
      while (performance.now() < until) {
        const key = keys[Math.floor(Math.random() * keys.length)];
        // A few claims are long-lived: the reapers must never delete them.
        const ttlMs = live.length < 4 && Math.random() < 0.1 ? 60_000 : 20;
        try {
          const result = await store.claim(key, claimRequest({ leaseMs: ttlMs, ttlMs }));
          if (result.kind === 'claimed' && ttlMs === 60_000) live.push({ key, ownerToken: result.record.ownerToken });
          if (result.kind === 'claimed' && Math.random() < 0.5) {
            await store.complete(key, result.record.ownerToken, sampleResponse());
          }
        } catch (error) {
          errors.push(error);
        }
      }
    };
    const reaper = async () => {
      const store = new TypeOrmIdempotencyStore(dataSource);
      while (performance.now() < until) {
        await store.deleteExpired(5).catch((error: unknown) => errors.push(error));
      }
    };
    await Promise.all([...Array.from({ length: 6 }, claimer), ...Array.from({ length: 3 }, reaper)]);
    expect(errors).toEqual([]);
    expect(live.length).toBeGreaterThan(0);
    const store = new TypeOrmIdempotencyStore(dataSource);
    for (const { key, ownerToken } of live) expect((await store.get(key))?.ownerToken).toBe(ownerToken);
  });

  it('transactional claims racing to replace one expired row: none answers with the expired record (InnoDB deadlock 1213)', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_000 });
    const answers: string[] = [];
    for (let round = 0; round < 4; round += 1) {
      const key = newId();
      const first = await store.claim(key, claimRequest({ leaseMs: 50, ttlMs: 50 }));
      await store.complete(key, first.record.ownerToken, sampleResponse());
      await sleep(80);
      // Each winner holds its claim a moment and fails (rolls back): the expired response is no answer.
      const settled = await Promise.all(
        [0, 1, 2].map(async () => {
          const result = await store.claimInTransaction(key, claimRequest());
          if (result.kind === 'claimed') {
            await sleep(100);
            await result.transaction.rollback();
            return 'claimed';
          }
          if (result.kind === 'existing' && result.record.expiresAtMs <= result.nowMs) return 'expired record';
          return result.kind;
        }),
      );
      answers.push(...settled);
    }
    expect(answers.filter((answer) => answer === 'expired record')).toEqual([]);
  });

  it('stores response headers larger than a TEXT column (64 KiB) as PostgreSQL does', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource);
    const key = newId();
    const claimed = await store.claim(key, claimRequest());
    const headers = { 'x-large': 'h'.repeat(70_000) };
    expect(await store.complete(key, claimed.record.ownerToken, sampleResponse({ headers }))).toBe(true);
    expect((await store.get(key))?.response?.headers).toEqual(headers);
  });
});
