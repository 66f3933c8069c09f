import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { IdempotencyService, MemoryIdempotencyStore, type DurableIdempotencyStore } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { idempotencyTypeOrmEntities, TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { buildScopedKey } from '../../libs/idempotency/src/engine/scoped-key.js';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { send, type SendOptions } from '../support/http/send.js';
import { openIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../support/servers/postgres.js';
import { deleteKeys, openRedis } from '../support/servers/redis.js';
import { DurableSwitchStore } from '../support/stores/durable-switch.store.js';
import { sleep } from '../support/timing.js';

/**
 * Issue 14 item 3: on a transactional route the durable row is claimed by the business
 * transaction's first statement (`DurableIdempotencyStore.claimInTransaction`) and completed in
 * it, one COMMIT. A duplicate's INSERT waits on the uncommitted row, so mutual exclusion holds
 * even when Redis has lost the record. Real PostgreSQL and Redis; sql.js at the end.
 */
const LOCK_TIMEOUT_MS = 1_500;

/** Every statement sent to PostgreSQL by this process while `counting` (pg `Client#query` calls, as the bench counts them). */
const sent: string[] = [];
/** How many of them started a round trip: sent while their connection had no query in flight (the rest were pipelined behind one). */
let roundTrips = 0;
let counting = false;
const clientPrototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const originalQuery = clientPrototype.query;

describe('durable claim inside the transaction (PostgreSQL + Redis)', () => {
  let schema: string;
  let dataSource: DataSource;
  let redis: Redis;
  let prefix: string;
  let fixture: ContractApp;
  let admin: pg.Client;

  const call = (options: SendOptions, url = fixture.url) =>
    send(url, '/tx-effect', { ...options, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });
  const effects = async (ref: string) =>
    Number((await dataSource.query('SELECT count(*) AS n FROM effects WHERE ref = $1', [ref]))[0].n);
  /** Redis forgets every record of this suite (eviction, failover, a flush). */
  const redisForgets = () => deleteKeys(redis, `${prefix}:`);
  /** Sessions of this suite's schema waiting for a lock (a duplicate's INSERT on an uncommitted row). */
  const waitingInserts = async () =>
    Number(
      (
        await admin.query(
          `SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
          [`%"${schema}"."idempotency_records"%`],
        )
      ).rows[0].n,
    );
  /** Sessions whose open transaction wrote to this suite's idempotency table (a claim not yet committed). */
  const openClaimSessions = `SELECT DISTINCT a.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
    JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE n.nspname = $1 AND c.relname = 'idempotency_records' AND l.mode = 'RowExclusiveLock'
    AND a.state LIKE 'idle in transaction%'`;
  const idleInTransaction = async () => (await admin.query(openClaimSessions, [schema])).rowCount ?? 0;
  const until = async (condition: () => Promise<boolean>, what: string, timeoutMs = 10_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await condition())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(20);
    }
  };
  const pool = () =>
    (dataSource.driver as unknown as { master: { totalCount: number; idleCount: number; waitingCount: number } })
      .master;

  beforeAll(async () => {
    admin = await connectPostgresOrFail();
    redis = await openRedis();
    schema = await createThrowawaySchema('tx_claim');
    dataSource = await openIdempotencyDataSource(schema);
    await dataSource.query('CREATE TABLE effects (ref text NOT NULL, seq integer NOT NULL)');
    prefix = `tx-claim-${randomUUID()}`;
    fixture = await startContractApp('express', new RedisIdempotencyStore(redis, { prefix }), {
      durableStore: new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: LOCK_TIMEOUT_MS }),
    });
    clientPrototype.query = function (this: unknown, ...args: unknown[]) {
      if (counting) {
        const first = args[0];
        sent.push(typeof first === 'string' ? first : String((first as { text?: unknown })?.text));
        if (!(this as { _activeQuery?: unknown })._activeQuery) roundTrips += 1;
      }
      return originalQuery.apply(this, args);
    };
  });
  afterAll(async () => {
    clientPrototype.query = originalQuery;
    await fixture?.app.close();
    if (redis && prefix) await deleteKeys(redis, `${prefix}:`);
    await redis?.quit();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
    await admin?.end();
  });

  it('Redis loses the record while the first request is in its handler: the duplicate waits on the uncommitted row, answers 409 after the lock timeout, and the handler ran once; the retry replays', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const gate = randomUUID();
    const runsBefore = fixture.probe.runs;
    const first = call({ key, body: { ref, gate } });
    await until(async () => fixture.probe.runs === runsBefore + 1, 'the first handler');
    await redisForgets();
    const pending = call({ key, body: { ref, gate } });
    // The duplicate's INSERT waits on the first transaction's uncommitted row (seen in pg_locks)...
    await until(async () => (await waitingInserts()) === 1, 'the duplicate waiting on the row');
    // ...until the lock timeout ends its wait with a 409, the first transaction still open.
    const duplicate = await pending;
    expect(duplicate.status).toBe(409);
    expect(duplicate.json().code).toBe('idempotency_request_in_progress');
    expect(Number(duplicate.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(fixture.probe.runs).toBe(runsBefore + 1);
    fixture.probe.open(gate);
    expect((await first).status).toBe(201);
    const retry = await call({ key, body: { ref, gate } });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals((await first).body)).toBe(true);
    expect(fixture.probe.runs).toBe(runsBefore + 1);
    expect(await effects(ref)).toBe(1);
  });

  it('a duplicate that waits sees the first COMMIT within the lock timeout and replays it (no second run)', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const gate = randomUUID();
    const runsBefore = fixture.probe.runs;
    const first = call({ key, body: { ref, gate } });
    await until(async () => fixture.probe.runs === runsBefore + 1, 'the first handler');
    await redisForgets();
    const duplicate = call({ key, body: { ref, gate } });
    await until(async () => (await waitingInserts()) === 1, 'the duplicate waiting on the row');
    fixture.probe.open(gate);
    const [firstAnswer, duplicateAnswer] = await Promise.all([first, duplicate]);
    expect(firstAnswer.status).toBe(201);
    expect(duplicateAnswer.status).toBe(201);
    expect(duplicateAnswer.headers.get('idempotent-replayed')).toBe('true');
    expect(duplicateAnswer.body.equals(firstAnswer.body)).toBe(true);
    expect(fixture.probe.runs).toBe(runsBefore + 1);
    expect(await effects(ref)).toBe(1);
    // The duplicate repaired the Redis record: the next retry replays from Redis.
    const retry = await call({ key, body: { ref, gate } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
  });

  it('the first rolls back (5xx) while the duplicate waits: the duplicate inserts and runs, its write commits once', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const gate = randomUUID();
    const runsBefore = fixture.probe.runs;
    const first = call({ key, body: { ref, gate, failOnce: 503 } });
    await until(async () => fixture.probe.runs === runsBefore + 1, 'the first handler');
    await redisForgets();
    const duplicate = call({ key, body: { ref, gate, failOnce: 503 } });
    await until(async () => (await waitingInserts()) === 1, 'the duplicate waiting on the row');
    fixture.probe.open(gate);
    const [firstAnswer, duplicateAnswer] = await Promise.all([first, duplicate]);
    expect(firstAnswer.status).toBe(503);
    expect(duplicateAnswer.status).toBe(201);
    expect(duplicateAnswer.headers.get('idempotent-replayed')).toBeNull();
    expect(fixture.probe.runs).toBe(runsBefore + 2);
    expect(await effects(ref)).toBe(1);
    const retry = await call({ key, body: { ref, gate, failOnce: 503 } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(duplicateAnswer.body)).toBe(true);
  });

  it("the first request's database session dies inside its transaction: the retry takes the dead fast lease over (tookOver, fencing 2) and runs once; the first cannot commit", async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const gate = randomUUID();
    const runsBefore = fixture.probe.runs;
    const first = call({ key, body: { ref, gate } });
    await until(async () => fixture.probe.runs === runsBefore + 1, 'the first handler');
    fixture.heartbeats.freeze(); // the process stops renewing its fast lease (300 ms)
    const terminated = await admin.query(`SELECT pg_terminate_backend(pid) FROM (${openClaimSessions}) AS open`, [
      schema,
    ]);
    expect(terminated.rowCount).toBe(1);
    await sleep(500);
    const retry = await call({ key, body: { ref, gate } });
    fixture.heartbeats.thaw();
    expect(retry.status).toBe(201);
    expect(retry.json()).toMatchObject({ fencing: 2, tookOver: true });
    fixture.probe.open(gate);
    const firstAnswer = await first;
    expect(firstAnswer.status).toBe(503);
    expect(fixture.probe.runs).toBe(runsBefore + 2);
    expect(await effects(ref)).toBe(1);
    const replay = await call({ key, body: { ref, gate } });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(retry.body)).toBe(true);
  });

  it('a stored failure (402) rolls its business write back to the savepoint and completes in the same transaction', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    counting = true;
    sent.length = 0;
    const failed = await call({ key, body: { ref, fail: 402 } });
    counting = false;
    expect(failed.status).toBe(402);
    expect(await effects(ref)).toBe(0);
    expect(sent.filter((text) => /^\s*COMMIT\b/i.test(text))).toHaveLength(1);
    expect(sent.some((text) => /ROLLBACK TO SAVEPOINT idempotency_handler/.test(text))).toBe(true);
    await redisForgets();
    const retry = await call({ key, body: { ref, fail: 402 } });
    expect(retry.status).toBe(402);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(failed.body)).toBe(true);
    expect(await effects(ref)).toBe(0);
  });

  it('a fresh request sends 6 statements in 3 round trips: BEGIN with the claim INSERT (which restores lock_timeout) and the savepoint, the handler, the completion with one COMMIT', async () => {
    const ref = randomUUID();
    counting = true;
    sent.length = 0;
    roundTrips = 0;
    const answer = await call({ key: randomUUID(), body: { ref } });
    counting = false;
    expect(answer.status).toBe(201);
    expect(sent).toHaveLength(6);
    expect(roundTrips).toBe(3);
    expect(sent[0]).toMatch(/^BEGIN/);
    expect(sent[1]).toMatch(
      /^WITH claimed AS \(INSERT INTO .*idempotency_records.*set_config\('lock_timeout'.*\) SELECT claimed\.\*, set_config\('lock_timeout', current_setting\('idempotency.saved_lock_timeout'\), true\)/s,
    );
    expect(sent[2]).toBe('SAVEPOINT idempotency_handler');
    expect(sent[3]).toMatch(/^INSERT INTO effects/);
    expect(sent[4]).toMatch(/^WITH completed AS \(UPDATE .*idempotency_records/s);
    expect(sent[5]).toBe('COMMIT');
    expect(await effects(ref)).toBe(1);
  });

  it("the handler's statements run under the application's lock_timeout, not the store's", async () => {
    const lockTimeouts: string[] = [];
    const service = fixture.app.get(IdempotencyService);
    const result = await service.run(
      { operation: 'lock-timeout-probe', key: randomUUID(), options: { transactional: true } },
      async (context) => {
        const manager = context.getManager<{ query(sql: string): Promise<Array<{ lock_timeout: string }>> }>();
        lockTimeouts.push((await manager.query('SHOW lock_timeout'))[0].lock_timeout);
        return 'ok';
      },
    );
    expect(result).toEqual({ status: 'fresh', value: 'ok' });
    const applicationDefault = (await admin.query('SHOW lock_timeout')).rows[0].lock_timeout as string;
    expect(applicationDefault).not.toBe(`${LOCK_TIMEOUT_MS}ms`);
    expect(lockTimeouts).toEqual([applicationDefault]);
  });

  describe('without execute', () => {
    const policy = () => fixture.app.get(IdempotencyService).policyFor({ transactional: true, ttlMs: 60_000 });
    const begin = (key: string) =>
      fixture.app.get(IdempotencyService).begin({
        scoped: buildScopedKey({ operation: 'no-execute', key }, ['operation']),
        fingerprint: 'f',
        policy: policy(),
      });

    it('abandon() rolls the open transaction back and frees the key; no connection is left in a transaction', async () => {
      const key = randomUUID();
      const begun = await begin(key);
      expect(begun.kind).toBe('claimed');
      expect(await idleInTransaction()).toBe(1);
      if (begun.kind !== 'claimed') return;
      expect(await fixture.app.get(IdempotencyService).abandon(begun.claim)).toBe('released');
      await until(async () => (await idleInTransaction()) === 0, 'the rollback');
      expect(pool().idleCount).toBe(pool().totalCount);
      const again = await begin(key);
      expect(again.kind).toBe('claimed');
      if (again.kind === 'claimed') await fixture.app.get(IdempotencyService).abandon(again.claim);
      expect(await idleInTransaction()).toBe(0);
    });

    it('finish() completes the row in the open transaction and commits it; the next begin replays', async () => {
      const key = randomUUID();
      const begun = await begin(key);
      if (begun.kind !== 'claimed') throw new Error(`expected a claim, got ${begun.kind}`);
      const response = {
        statusCode: 200,
        headers: { 'content-type': 'application/json' },
        body: Buffer.from('{"a":1}'),
      };
      expect(await fixture.app.get(IdempotencyService).finish(begun.claim, response)).toBe('stored');
      expect(await idleInTransaction()).toBe(0);
      expect(pool().idleCount).toBe(pool().totalCount);
      await redisForgets();
      const again = await begin(key);
      expect(again.kind).toBe('replay');
    });

    it('a duplicate of a claim whose transaction is still open (never executed) answers in-progress after the lock timeout, then runs once the claim is abandoned', async () => {
      const key = randomUUID();
      const begun = await begin(key);
      if (begun.kind !== 'claimed') throw new Error(`expected a claim, got ${begun.kind}`);
      await redisForgets();
      const duplicate = await begin(key);
      expect(duplicate.kind).toBe('in-progress');
      await fixture.app.get(IdempotencyService).abandon(begun.claim);
      const after = await begin(key);
      expect(after.kind).toBe('claimed');
      if (after.kind === 'claimed') await fixture.app.get(IdempotencyService).abandon(after.claim);
      await until(async () => (await idleInTransaction()) === 0, 'the rollbacks');
    });
  });

  it('a committed in_progress row (old protocol, or a non-transactional route) is judged as before: live lease → 409, lapsed → taken over and run once', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    expect((await call({ key, body: { ref } })).status).toBe(201);
    const [{ key: rowKey }] = (await dataSource.query(
      'SELECT "key" FROM idempotency_records ORDER BY created_at_ms DESC LIMIT 1',
    )) as Array<{ key: string }>;
    // What the previous version committed before its transaction: an in_progress row, live lease.
    await dataSource.query(
      `UPDATE idempotency_records SET state = 'in_progress', owner_token = 'old-protocol-owner', fencing_token = 1,
         lease_expires_at_ms = lease_expires_at_ms + 600000, response_status = NULL, response_headers = NULL,
         response_body = NULL, response_body_omitted = FALSE WHERE "key" = $1`,
      [rowKey],
    );
    await dataSource.query('DELETE FROM effects WHERE ref = $1', [ref]);
    await redisForgets();
    const runsBefore = fixture.probe.runs;
    const live = await call({ key, body: { ref } });
    expect(live.status).toBe(409);
    expect(fixture.probe.runs).toBe(runsBefore);
    await dataSource.query('UPDATE idempotency_records SET lease_expires_at_ms = 0 WHERE "key" = $1', [rowKey]);
    await redisForgets();
    const takenOver = await call({ key, body: { ref } });
    expect(takenOver.status).toBe(201);
    expect(takenOver.json()).toMatchObject({ fencing: 2, tookOver: true });
    expect(fixture.probe.runs).toBe(runsBefore + 1);
    expect(await effects(ref)).toBe(1);
    const retry = await call({ key, body: { ref } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(ref)).toBe(1);
  });

  it('an expired row is replaced inside the transaction (fencing + 1) and the request runs', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    expect((await call({ key, body: { ref } })).status).toBe(201);
    await dataSource.query(
      'UPDATE idempotency_records SET expires_at_ms = 1 WHERE "key" = (SELECT "key" FROM idempotency_records ORDER BY created_at_ms DESC LIMIT 1)',
    );
    await redisForgets();
    const again = await call({ key, body: { ref } });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(again.json()).toMatchObject({ fencing: 2 });
    expect(await effects(ref)).toBe(2);
  });

  it('under REPEATABLE READ (a DataSource isolationLevel) a duplicate that waited for a claim that committed gets the committed row (its plain INSERT fails on the key, and it reads the row in a new transaction)', async () => {
    const strict = await new DataSource({
      type: 'postgres',
      url: process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
      schema,
      extra: { options: `-c search_path=${schema}` },
      isolationLevel: 'REPEATABLE READ',
    }).initialize();
    try {
      const store = new TypeOrmIdempotencyStore(strict, { lockTimeoutMs: 10_000 });
      const key = randomUUID();
      const request = () => ({ ownerToken: randomUUID(), fingerprint: 'f', leaseMs: 30_000, ttlMs: 60_000 });
      const first = await store.claimInTransaction(key, request());
      if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
      const waiting = store.claimInTransaction(key, request());
      await until(async () => (await waitingInserts()) === 1, 'the duplicate waiting on the row');
      const response = { statusCode: 201, headers: {}, body: Buffer.from('{}') };
      expect(await first.transaction.complete(response)).toBe(true);
      await first.transaction.commit();
      const duplicate = await waiting;
      expect(duplicate.kind).toBe('existing');
      if (duplicate.kind === 'existing') expect(duplicate.record.state).toBe('completed');
      const retry = await store.claimInTransaction(key, request());
      expect(retry.kind).toBe('existing');
      if (retry.kind === 'existing') expect(retry.record.state).toBe('completed');
    } finally {
      await strict.destroy();
    }
  });

  describe('commitOnComplete: the completion and the COMMIT in one round trip', () => {
    const response = { statusCode: 201, headers: {}, body: Buffer.from('{}') };
    const rows = async (key: string) =>
      (await admin.query(`SELECT state FROM ${schema}.idempotency_records WHERE "key" = $1`, [key])).rows.map(
        (row: { state: string }) => row.state,
      );
    /** A claim of a new key whose transaction holds one business write (`ref`), not yet completed. */
    const claimWithWrite = async (
      how: { ttlMs?: number; commitOnComplete?: boolean; store?: TypeOrmIdempotencyStore } = {},
    ) => {
      const key = randomUUID();
      const ref = randomUUID();
      const store = how.store ?? new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: LOCK_TIMEOUT_MS });
      const opened = await store.claimInTransaction(
        key,
        { ownerToken: randomUUID(), fingerprint: 'f', leaseMs: 30_000, ttlMs: how.ttlMs ?? 60_000 },
        { commitOnComplete: how.commitOnComplete ?? true },
      );
      if (opened.kind !== 'claimed') throw new Error(`expected claimed, got ${opened.kind}`);
      const manager = opened.transaction.manager as DataSource['manager'];
      await manager.query('INSERT INTO effects (ref, seq) VALUES ($1, 1)', [ref]);
      return { key, ref, transaction: opened.transaction, manager };
    };

    it('commits the business write and the completed row together', async () => {
      const { key, ref, transaction } = await claimWithWrite();
      expect(await transaction.complete(response)).toBe(true);
      await transaction.commit();
      expect(await rows(key)).toEqual(['completed']);
      expect(await effects(ref)).toBe(1);
    });

    it('a completion that changes no row (the TTL elapsed under the handler) answers false and the COMMIT sent with it rolls the business write back', async () => {
      const { key, ref, transaction } = await claimWithWrite({ ttlMs: 1 });
      await sleep(20);
      expect(await transaction.complete(response)).toBe(false);
      await transaction.rollback();
      expect(await rows(key)).toEqual([]);
      expect(await effects(ref)).toBe(0);
    });

    it.each([
      ['prepared once per connection (the default)', true],
      ['sent unnamed (preparedStatements: false)', false],
    ])('the claim and the completion: %s', async (_how, preparedStatements) => {
      // A pool of its own: the shared one's connections may hold the statements already.
      const ownPool = await openIdempotencyDataSource(schema);
      try {
        const store = new TypeOrmIdempotencyStore(ownPool, { lockTimeoutMs: LOCK_TIMEOUT_MS, preparedStatements });
        const { key, ref, transaction, manager } = await claimWithWrite({ store });
        const prepared = (await manager.query(
          "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'idempotency\\_%'",
        )) as Array<{ statement: string }>;
        expect(prepared.some(({ statement }) => statement.startsWith('WITH claimed AS (INSERT'))).toBe(
          preparedStatements,
        );
        expect(await transaction.complete(response)).toBe(true);
        await transaction.commit();
        expect(await rows(key)).toEqual(['completed']);
        expect(await effects(ref)).toBe(1);
      } finally {
        await ownPool.destroy();
      }
    });

    it('without it, complete() leaves the transaction open: a rollback after it commits nothing', async () => {
      const { key, ref, transaction } = await claimWithWrite({ commitOnComplete: false });
      expect(await transaction.complete(response)).toBe(true);
      await transaction.rollback();
      expect(await rows(key)).toEqual([]);
      expect(await effects(ref)).toBe(0);
    });
  });

  it('a store without claimInTransaction keeps the separate, autocommitted claim (7 statements) and the same answers', async () => {
    const fallbackPrefix = `tx-claim-fallback-${randomUUID()}`;
    const fallback = await startContractApp('express', new RedisIdempotencyStore(redis, { prefix: fallbackPrefix }), {
      durableStore: new DurableSwitchStore(new TypeOrmIdempotencyStore(dataSource)),
    });
    try {
      const ref = randomUUID();
      const key = randomUUID();
      counting = true;
      sent.length = 0;
      const first = await call({ key, body: { ref } }, fallback.url);
      counting = false;
      expect(first.status).toBe(201);
      expect(sent).toHaveLength(7);
      expect(sent.filter((text) => /^\s*COMMIT\b/i.test(text))).toHaveLength(1);
      expect(sent[0]).toMatch(/^INSERT INTO .*idempotency_records/s);
      expect(sent.some((text) => /FOR UPDATE/.test(text))).toBe(true);
      await deleteKeys(redis, `${fallbackPrefix}:`);
      const retry = await call({ key, body: { ref } }, fallback.url);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(await effects(ref)).toBe(1);
    } finally {
      counting = false;
      await fallback.app.close();
      await deleteKeys(redis, `${fallbackPrefix}:`);
    }
  });
});

describe('durable claim inside the transaction (sql.js)', () => {
  let dataSource: DataSource;
  let service: IdempotencyService;
  let close: () => Promise<void>;
  const effects = async (ref: string) =>
    Number((await dataSource.query('SELECT count(*) AS n FROM effects WHERE ref = ?', [ref]))[0].n);

  beforeAll(async () => {
    dataSource = await new DataSource({
      type: 'sqljs',
      entities: idempotencyTypeOrmEntities('sqljs'),
      synchronize: true,
    }).initialize();
    await dataSource.query('CREATE TABLE effects (ref text NOT NULL)');
    const durable: DurableIdempotencyStore = new TypeOrmIdempotencyStore(dataSource);
    expect(typeof durable.claimInTransaction).toBe('function');
    const fixture = await startContractApp('express', new MemoryIdempotencyStore(), { durableStore: durable });
    service = fixture.app.get(IdempotencyService);
    close = () => fixture.app.close();
  });
  afterAll(async () => {
    await close?.();
    await dataSource?.destroy();
  });

  const write = (ref: string) => async (context: { getManager<T>(): T }) => {
    await context
      .getManager<{ query(sql: string, params: unknown[]): Promise<unknown> }>()
      .query('INSERT INTO effects (ref) VALUES (?)', [ref]);
    return { ref };
  };

  it('runs once and commits the write with the completed row; the retry replays', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const options = { transactional: true };
    expect(await service.run({ operation: 'sqljs', key, options }, write(ref))).toEqual({
      status: 'fresh',
      value: { ref },
    });
    expect(await service.run({ operation: 'sqljs', key, options }, write(ref))).toEqual({
      status: 'replayed',
      value: { ref },
    });
    expect(await effects(ref)).toBe(1);
    const rows = (await dataSource.query(
      "SELECT count(*) AS n FROM idempotency_records WHERE state = 'completed'",
    )) as Array<{
      n: number;
    }>;
    expect(Number(rows[0].n)).toBeGreaterThanOrEqual(1);
  });

  it('a failure rolls the write back and frees the key; concurrent runs of one key run the function once', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const options = { transactional: true };
    await expect(
      service.run({ operation: 'sqljs', key, options }, async (context) => {
        await write(ref)(context);
        throw new Error('transient');
      }),
    ).rejects.toThrow('transient');
    expect(await effects(ref)).toBe(0);
    let runs = 0;
    const results = await Promise.allSettled(
      Array.from({ length: 5 }, () =>
        service.run({ operation: 'sqljs', key, options }, async (context) => {
          runs += 1;
          await sleep(20);
          return write(ref)(context);
        }),
      ),
    );
    expect(runs).toBe(1);
    expect(results.filter((result) => result.status === 'fulfilled' && result.value.status === 'fresh')).toHaveLength(
      1,
    );
    expect(await effects(ref)).toBe(1);
  });

  it('abandon() ends the transaction and releases the exclusive section: the next operation runs', async () => {
    const scoped = buildScopedKey({ operation: 'sqljs-abandon', key: randomUUID() }, ['operation']);
    const policy = service.policyFor({ transactional: true });
    const begun = await service.begin({ scoped, fingerprint: 'f', policy });
    expect(begun.kind).toBe('claimed');
    if (begun.kind === 'claimed') await service.abandon(begun.claim);
    const again = await service.begin({ scoped, fingerprint: 'f', policy });
    expect(again.kind).toBe('claimed');
    if (again.kind === 'claimed') await service.abandon(again.claim);
    expect(await effects('nothing')).toBe(0);
  });
});
