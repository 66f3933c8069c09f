import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  TypeOrmIdempotencyStore,
} from 'nestjs-idempotency/typeorm';
import {
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  TEST_DATABASE_URL,
} from '../support/servers/postgres.js';

/**
 * The TypeORM store's pipelined batches against what a pooled connection meets in production: a
 * pool of one connection, so that every request reuses the client the previous one left behind
 * (after a `DISCARD ALL`, a terminated backend, another store's statements). Real PostgreSQL.
 */
describe('TypeORM store batches on a reused pooled connection (PostgreSQL)', () => {
  const schemas: string[] = [];
  const pools: DataSource[] = [];
  let admin: pg.Client;
  const response = { statusCode: 201, headers: {}, body: Buffer.from('{}') };

  /** A DataSource of one pooled connection on a fresh schema, the idempotency table and `effects` in it. */
  const openPool = async (): Promise<{ dataSource: DataSource; schema: string }> => {
    const schema = await createThrowawaySchema('pipeline_store');
    schemas.push(schema);
    const dataSource = await new DataSource({
      type: 'postgres',
      url: TEST_DATABASE_URL,
      schema,
      poolSize: 1,
      entities: IDEMPOTENCY_TYPEORM_ENTITIES,
      migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
    }).initialize();
    pools.push(dataSource);
    await dataSource.runMigrations();
    await dataSource.query(`CREATE TABLE "${schema}".effects (ref text NOT NULL)`);
    return { dataSource, schema };
  };
  /** Another DataSource of one pooled connection on `schema`, its connections started with `extra` (node-postgres options). */
  const openPoolOn = async (schema: string, extra: Record<string, unknown> = {}) => {
    const dataSource = await new DataSource({
      type: 'postgres',
      url: TEST_DATABASE_URL,
      schema,
      poolSize: 1,
      entities: IDEMPOTENCY_TYPEORM_ENTITIES,
      extra,
    }).initialize();
    pools.push(dataSource);
    return dataSource;
  };
  /** `claimInTransaction` as the engine calls it: a fresh owner, the COMMIT sent with the completion. */
  const claim = (store: TypeOrmIdempotencyStore, key: string, ttlMs = 60_000) =>
    store.claimInTransaction(
      key,
      { ownerToken: randomUUID(), fingerprint: 'f', leaseMs: 30_000, ttlMs },
      { commitOnComplete: true },
    );
  /** The open transaction of a claim that must have been made. */
  const claimed = async (store: TypeOrmIdempotencyStore, key: string, ttlMs?: number) => {
    const opened = await claim(store, key, ttlMs);
    if (opened.kind !== 'claimed') throw new Error(`expected claimed, got ${opened.kind}`);
    return opened.transaction;
  };
  /** One route's transaction: claim a new key, write `ref`, complete with the COMMIT behind it, commit. */
  const route = async (store: TypeOrmIdempotencyStore, schema: string) => {
    const key = randomUUID();
    const ref = randomUUID();
    const transaction = await claimed(store, key);
    await (transaction.manager as DataSource['manager']).query(`INSERT INTO "${schema}".effects (ref) VALUES ($1)`, [
      ref,
    ]);
    expect(await transaction.complete(response)).toBe(true);
    await transaction.commit();
    return { key, ref };
  };
  const state = async (schema: string, key: string) =>
    (await admin.query(`SELECT state FROM "${schema}".idempotency_records WHERE "key" = $1`, [key])).rows.map(
      (row: { state: string }) => row.state,
    );
  const effects = async (schema: string, ref: string) =>
    Number((await admin.query(`SELECT count(*) AS n FROM "${schema}".effects WHERE ref = $1`, [ref])).rows[0].n);

  /** Two routes in a row commit their write with a completed row (the second on a connection the first healed). */
  const expectServed = async (store: TypeOrmIdempotencyStore, schema: string) => {
    for (let request = 0; request < 2; request += 1) {
      const { key, ref } = await route(store, schema);
      expect(await state(schema, key)).toEqual(['completed']);
      expect(await effects(schema, ref)).toBe(1);
    }
  };
  /** The pool's one connection is back clean: out of pipeline mode, no transaction, lock_timeout not leaked, its answers its own. */
  const expectClean = async (dataSource: DataSource) => {
    const runner = dataSource.createQueryRunner();
    try {
      const client = (await runner.connect()) as { pipeline?: boolean; getTransactionStatus(): string | null };
      expect(client.pipeline).toBe(false);
      expect(await runner.query('SELECT $1::int AS n', [7])).toEqual([{ n: 7 }]);
      expect(client.getTransactionStatus()).toBe('I');
      expect(await runner.query("SELECT current_setting('lock_timeout') AS t")).toEqual([{ t: '0' }]);
      expect(runner.isTransactionActive).toBe(false);
    } finally {
      await runner.release();
    }
  };
  /** A claim of a new key whose open transaction holds one business write, `ref`. */
  const claimWithWrite = async (store: TypeOrmIdempotencyStore, schema: string, ref: string) => {
    const key = randomUUID();
    const transaction = await claimed(store, key);
    const manager = transaction.manager as DataSource['manager'];
    const [{ pid }] = (await manager.query('SELECT pg_backend_pid() AS pid')) as Array<{ pid: number }>;
    await manager.query(`INSERT INTO "${schema}".effects (ref) VALUES ($1)`, [ref]);
    return { key, transaction, pid };
  };
  /** A deferred trigger on `effects`: the COMMIT of a write whose ref starts with `prefix` runs `body` (PL/pgSQL). */
  const atCommit = async (schema: string, prefix: string, body: string) => {
    await admin.query(`CREATE FUNCTION "${schema}".at_commit_${prefix}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN ${body}; RETURN NULL; END $$`);
    await admin.query(`CREATE CONSTRAINT TRIGGER at_commit_${prefix} AFTER INSERT ON "${schema}".effects
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.ref LIKE '${prefix}%')
      EXECUTE FUNCTION "${schema}".at_commit_${prefix}()`);
  };
  const until = async (condition: () => Promise<boolean>, what: string) => {
    const deadline = Date.now() + 10_000;
    while (!(await condition())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };

  beforeAll(async () => {
    admin = await connectPostgresOrFail();
  });
  afterAll(async () => {
    await Promise.all(pools.map((dataSource) => dataSource.destroy()));
    await admin?.end();
    await Promise.all(schemas.map((schema) => dropSchema(schema)));
  });

  it('a connection whose prepared statements were discarded (DISCARD ALL, DEALLOCATE ALL) keeps serving claims', async () => {
    const { dataSource, schema } = await openPool();
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    await route(store, schema);
    // What a pooler's reset query or the application does on the pool's one connection.
    for (const reset of ['DISCARD ALL', 'DEALLOCATE ALL']) {
      await dataSource.query(reset);
      await expectServed(store, schema);
    }
  });

  it('a client that does not know the statements its connection holds (as after a pooler handed it another server connection) keeps serving claims', async () => {
    const { dataSource, schema } = await openPool();
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    await route(store, schema);
    const runner = dataSource.createQueryRunner();
    try {
      const client = (await runner.connect()) as { connection: { parsedStatements: Record<string, string> } };
      for (const name of Object.keys(client.connection.parsedStatements))
        delete client.connection.parsedStatements[name];
    } finally {
      await runner.release();
    }
    await expectServed(store, schema);
  });

  it('a completion whose prepared statement the transaction dropped fails with what to do, commits nothing, and the next route is served', async () => {
    const { dataSource, schema } = await openPool();
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    await route(store, schema);
    const ref = randomUUID();
    const { key, transaction } = await claimWithWrite(store, schema, ref);
    await (transaction.manager as DataSource['manager']).query('DEALLOCATE ALL');
    await expect(transaction.complete(response)).rejects.toThrow(/preparedStatements: false/);
    await transaction.rollback();
    expect(await state(schema, key)).toEqual([]);
    expect(await effects(schema, ref)).toBe(0);
    await expectServed(store, schema);
  });

  it('after a completion that changed no row, the same connection answers a plain TypeORM query with its own rows, outside any transaction', async () => {
    const { dataSource, schema } = await openPool();
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    const transaction = await claimed(store, randomUUID(), 1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await transaction.complete(response)).toBe(false);
    await transaction.rollback();
    await expectClean(dataSource);
    await route(store, schema);
  });

  it('a serialization failure raised at the COMMIT sent with the completion: commit() reports it as one, nothing committed, the connection clean', async () => {
    const { dataSource, schema } = await openPool();
    await atCommit(schema, 'conflict', "RAISE EXCEPTION 'write skew' USING ERRCODE = '40001'");
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    const ref = `conflict-${randomUUID()}`;
    const { key, transaction } = await claimWithWrite(store, schema, ref);
    expect(await transaction.complete(response)).toBe(true);
    const failure = await transaction.commit().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(store.isSerializationFailure(failure)).toBe(true);
    await transaction.rollback();
    expect(await state(schema, key)).toEqual([]);
    expect(await effects(schema, ref)).toBe(0);
    await expectClean(dataSource);
    await route(store, schema);
  });

  it('the backend killed during the COMMIT sent with the completion: commit() fails (an outcome it cannot know), and the pool serves the next route on a new connection', async () => {
    const { dataSource, schema } = await openPool();
    await atCommit(schema, 'slow', 'PERFORM pg_sleep(30)');
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    const ref = `slow-${randomUUID()}`;
    const { key, transaction, pid } = await claimWithWrite(store, schema, ref);
    const completing = transaction.complete(response);
    await until(
      async () =>
        (
          await admin.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query = 'COMMIT' AND state = 'active'`, [
            pid,
          ])
        ).rowCount === 1,
      'the COMMIT to run',
    );
    await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    // The completion was answered before the COMMIT was cut: complete() cannot call it lost.
    expect(await completing).toBe(true);
    await expect(transaction.commit()).rejects.toThrow();
    await transaction.rollback();
    expect(await state(schema, key)).toEqual([]);
    expect(await effects(schema, ref)).toBe(0);
    await expectClean(dataSource);
    await route(store, schema);
  });

  it('the socket reset (ECONNRESET) while the completion runs, the COMMIT already sent: complete() does not call it a definite failure, for the COMMIT does happen', async () => {
    const { dataSource, schema } = await openPool();
    await admin.query(`CREATE FUNCTION "${schema}".slow_completion() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$`);
    await admin.query(`CREATE TRIGGER slow_completion BEFORE UPDATE ON "${schema}".idempotency_records
      FOR EACH ROW WHEN (NEW.state = 'completed') EXECUTE FUNCTION "${schema}".slow_completion()`);
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    const ref = randomUUID();
    const { key, transaction, pid } = await claimWithWrite(store, schema, ref);
    const runner = (transaction.manager as DataSource['manager']).queryRunner as unknown as {
      databaseConnection: { connection: { stream: { destroy(error: Error): void } } };
    };
    const completing = transaction.complete(response).then(
      (answer) => ({ answer }),
      (error: unknown) => ({ error }),
    );
    await until(
      async () =>
        (await admin.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep'`, [pid]))
          .rowCount === 1,
      'the completion to run',
    );
    runner.databaseConnection.connection.stream.destroy(
      Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', errno: -104, syscall: 'read' }),
    );
    expect(await completing).toEqual({ answer: true });
    await expect(transaction.commit()).rejects.toThrow();
    await transaction.rollback();
    // The server had the COMMIT before the socket went: it commits the write with its completed row.
    await until(async () => (await state(schema, key))[0] === 'completed', 'the COMMIT');
    expect(await effects(schema, ref)).toBe(1);
    await expectClean(dataSource);
  });

  it('the backend killed while its claim INSERT waits for a duplicate key held by another transaction: the claim fails, the holder completes, the pool recovers', async () => {
    const { dataSource, schema } = await openPool();
    const holderPool = await openPoolOn(schema);
    const holder = new TypeOrmIdempotencyStore(holderPool, { lockTimeoutMs: 10_000 });
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 10_000 });
    const key = randomUUID();
    const held = await claimed(holder, key);
    const duplicate = claim(store, key).then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    );
    let waiting: number | undefined;
    await until(async () => {
      const { rows } = await admin.query(
        `SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
        [`%"${schema}"."idempotency_records"%`],
      );
      waiting = rows[0]?.pid;
      return waiting !== undefined;
    }, 'the duplicate to wait');
    await admin.query('SELECT pg_terminate_backend($1)', [waiting]);
    const outcome = await duplicate;
    expect('error' in outcome).toBe(true);
    expect(await held.complete(response)).toBe(true);
    await held.commit();
    expect(await state(schema, key)).toEqual(['completed']);
    await expectClean(dataSource);
    const again = await claim(store, key);
    expect(again.kind).toBe('existing');
    await route(store, schema);
  });

  it('a statement_timeout that cuts the claim INSERT waiting on a held key inside the batch: the claim fails, nothing is left open, the connection serves the next claim', async () => {
    const { dataSource: holderPool, schema } = await openPool();
    const timedPool = await openPoolOn(schema, { statement_timeout: 300 });
    const holder = new TypeOrmIdempotencyStore(holderPool, { lockTimeoutMs: 10_000 });
    const store = new TypeOrmIdempotencyStore(timedPool, { lockTimeoutMs: 10_000 });
    const key = randomUUID();
    const held = await claimed(holder, key);
    await expect(claim(store, key)).rejects.toThrow(/statement timeout/);
    await expectClean(timedPool);
    expect(await held.complete(response)).toBe(true);
    await held.commit();
    expect((await claim(store, key)).kind).toBe('existing');
    await expectClean(timedPool);
  });

  it.each([
    ['a completion that changed no row (the COMMIT behind it answered ROLLBACK)', 'lost'],
    ['a serialization failure at the COMMIT', 'conflict'],
  ])(
    'TypeORM subscribers hear the transaction end in a rollback after %s, as with TypeORM’s own commitTransaction',
    async (_case, how) => {
      const { dataSource, schema } = await openPool();
      await atCommit(schema, 'conflict', "RAISE EXCEPTION 'write skew' USING ERRCODE = '40001'");
      const events: string[] = [];
      const heard = (event: string) => () => void events.push(event);
      dataSource.subscribers.push({
        beforeTransactionStart: heard('BeforeTransactionStart'),
        afterTransactionStart: heard('AfterTransactionStart'),
        beforeTransactionCommit: heard('BeforeTransactionCommit'),
        afterTransactionCommit: heard('AfterTransactionCommit'),
        beforeTransactionRollback: heard('BeforeTransactionRollback'),
        afterTransactionRollback: heard('AfterTransactionRollback'),
      });
      const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
      const key = randomUUID();
      const transaction = await claimed(store, key, how === 'lost' ? 1 : 60_000);
      const ref = `${how}-${randomUUID()}`;
      await (transaction.manager as DataSource['manager']).query(`INSERT INTO "${schema}".effects (ref) VALUES ($1)`, [
        ref,
      ]);
      await new Promise((resolve) => setTimeout(resolve, 20));
      // As the engine ends it: complete, then commit when it answered true; rollback either way.
      try {
        if (await transaction.complete(response)) await transaction.commit();
      } catch {
        // the failure itself is another test's subject
      } finally {
        await transaction.rollback();
      }
      expect(await effects(schema, ref)).toBe(0);
      expect(events.slice(0, 2)).toEqual(['BeforeTransactionStart', 'AfterTransactionStart']);
      expect(events).not.toContain('AfterTransactionCommit');
      expect(events.at(-1)).toBe('AfterTransactionRollback');
      await expectClean(dataSource);
    },
  );
});
