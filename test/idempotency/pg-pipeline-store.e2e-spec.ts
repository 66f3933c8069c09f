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
  /** One route's transaction: claim a new key, write `ref`, complete with the COMMIT behind it, commit. */
  const route = async (store: TypeOrmIdempotencyStore, schema: string) => {
    const key = randomUUID();
    const ref = randomUUID();
    const opened = await store.claimInTransaction(
      key,
      { ownerToken: randomUUID(), fingerprint: 'f', leaseMs: 30_000, ttlMs: 60_000 },
      { commitOnComplete: true },
    );
    if (opened.kind !== 'claimed') throw new Error(`expected claimed, got ${opened.kind}`);
    await (opened.transaction.manager as DataSource['manager']).query(
      `INSERT INTO "${schema}".effects (ref) VALUES ($1)`,
      [ref],
    );
    expect(await opened.transaction.complete(response)).toBe(true);
    await opened.transaction.commit();
    return { key, ref };
  };
  const state = async (schema: string, key: string) =>
    (await admin.query(`SELECT state FROM "${schema}".idempotency_records WHERE "key" = $1`, [key])).rows.map(
      (row: { state: string }) => row.state,
    );
  const effects = async (schema: string, ref: string) =>
    Number((await admin.query(`SELECT count(*) AS n FROM "${schema}".effects WHERE ref = $1`, [ref])).rows[0].n);

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
      for (let request = 0; request < 2; request += 1) {
        const { key, ref } = await route(store, schema);
        expect(await state(schema, key)).toEqual(['completed']);
        expect(await effects(schema, ref)).toBe(1);
      }
    }
  });

  it('after a completion that changed no row, the same connection answers a plain TypeORM query with its own rows, outside any transaction', async () => {
    const { dataSource, schema } = await openPool();
    const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_500 });
    const opened = await store.claimInTransaction(
      randomUUID(),
      { ownerToken: randomUUID(), fingerprint: 'f', leaseMs: 30_000, ttlMs: 1 },
      { commitOnComplete: true },
    );
    if (opened.kind !== 'claimed') throw new Error(`expected claimed, got ${opened.kind}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await opened.transaction.complete(response)).toBe(false);
    await opened.transaction.rollback();
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
    await route(store, schema);
  });
});
