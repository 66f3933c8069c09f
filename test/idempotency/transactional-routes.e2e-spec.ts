import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import {
  IdempotencyModule,
  IdempotencyNestedTransactionError,
  IdempotencyService,
  MemoryIdempotencyStore,
} from 'nestjs-idempotency';
import {
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
  idempotencyTypeOrmEntities,
  TypeOrmIdempotencyStore,
  type TypeOrmIdempotencyStoreOptions,
} from 'nestjs-idempotency/typeorm';
import { Test } from '@nestjs/testing';
import {
  Effect,
  startTransactionalRoutesApp,
  type TransactionalRoutesApp,
} from '../support/apps/transactional-routes.app.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { waitUntil } from '../support/timing.js';
import {
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  TEST_DATABASE_URL,
} from '../support/servers/postgres.js';

/**
 * Transactional routes that real Nest code can use (issue 24), on PostgreSQL and sql.js:
 * services joined through `@nestjs-cls/transactional`, writes outside the route's transaction
 * reported, isolation per route, serialization failures as definite rollbacks (503, retry at
 * once), and nested transactional runs refused.
 */
type Backend = 'postgres' | 'sqljs' | 'postgres, partitioned table';

/** The store's options on each backend: the partitioned table needs its `partitioning`. */
const storeOptionsOf = (backend: Backend): TypeOrmIdempotencyStoreOptions =>
  backend === 'postgres, partitioned table' ? { partitioning: { partitionMs: 1_000 } } : {};

async function openDataSource(backend: Backend, schema: string): Promise<DataSource> {
  const dataSource = await new DataSource(
    backend !== 'sqljs'
      ? {
          type: 'postgres',
          url: TEST_DATABASE_URL,
          schema,
          extra: { options: `-c search_path=${schema}` },
          entities: [...IDEMPOTENCY_TYPEORM_ENTITIES, Effect],
          migrations:
            backend === 'postgres' ? IDEMPOTENCY_TYPEORM_MIGRATIONS : IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
        }
      : {
          type: 'sqljs',
          entities: [...idempotencyTypeOrmEntities('sqljs'), Effect],
          migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
        },
  ).initialize();
  await dataSource.runMigrations();
  await dataSource.query('CREATE TABLE tx_effects (id varchar(64) PRIMARY KEY, ref varchar(64) NOT NULL)');
  return dataSource;
}

const post = (fixture: TransactionalRoutesApp, path: string, key: string, body: object) =>
  fetch(`${fixture.url}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
    body: JSON.stringify(body),
  });

const BACKENDS: Backend[] = ['postgres', 'sqljs', 'postgres, partitioned table'];

describe.each<Backend>(BACKENDS)('transactional routes with @nestjs-cls/transactional (%s)', (backend) => {
  let schema = '';
  let dataSource: DataSource;
  let fixture: TransactionalRoutesApp;
  const effects = async (ref: string) => dataSource.getRepository(Effect).countBy({ ref });

  beforeAll(async () => {
    if (backend !== 'sqljs') {
      await (await connectPostgresOrFail()).end();
      schema = await createThrowawaySchema('tx_routes');
    }
    dataSource = await openDataSource(backend, schema);
    fixture = await startTransactionalRoutesApp(dataSource, { cls: true, store: storeOptionsOf(backend) });
  });
  afterAll(async () => {
    await fixture?.app.close();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  it("a service writing through TransactionHost joins the route's transaction: committed with the completed record, replayed once", async () => {
    const ref = randomUUID();
    const key = randomUUID();
    expect((await post(fixture, '/cls', key, { ref })).status).toBe(201);
    const replay = await post(fixture, '/cls', key, { ref });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(ref)).toBe(1);
  });

  it("a failure after the service's write rolls the write back with the released key; the retry commits once", async () => {
    const ref = randomUUID();
    const key = randomUUID();
    expect((await post(fixture, '/cls', key, { ref, fail: true })).status).toBe(503);
    expect(await effects(ref)).toBe(0);
    const retry = await post(fixture, '/cls', key, { ref });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(ref)).toBe(1);
  });

  it('a transactional run() inside a transactional handler is refused with IdempotencyNestedTransactionError, the same on both databases', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyModule.forRoot({
          store: new MemoryIdempotencyStore(),
          durableStore: new TypeOrmIdempotencyStore(dataSource, storeOptionsOf(backend)),
        }),
      ],
    }).compile();
    const idempotency = moduleRef.get(IdempotencyService);
    const transactional = { transactional: true };
    const innerKey = randomUUID();
    let inner: unknown;
    try {
      const outer = await idempotency.run(
        { operation: 'outer', key: randomUUID(), options: transactional },
        async () => {
          inner = await idempotency
            .run({ operation: 'inner', key: innerKey, options: transactional }, () => 'inner ran')
            .catch((error: unknown) => error);
          return 'outer ran';
        },
      );
      expect(outer).toEqual({ status: 'fresh', value: 'outer ran' });
      expect(inner).toBeInstanceOf(IdempotencyNestedTransactionError);
      expect((inner as Error).message).toMatch(/"inner" was started inside the transaction of "outer"/);
      // Nothing of the inner run was recorded: run on its own, it runs.
      const again = await idempotency.run({ operation: 'inner', key: innerKey, options: transactional }, () => 'now');
      expect(again).toEqual({ status: 'fresh', value: 'now' });
    } finally {
      await moduleRef.close();
    }
  });
});

describe('transactional routes on PostgreSQL: outside writes, isolation, serialization failures', () => {
  let schema: string;
  let dataSource: DataSource;
  let fixture: TransactionalRoutesApp;
  const logs = new RecordingLogger();

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    schema = await createThrowawaySchema('tx_iso');
    dataSource = await openDataSource('postgres', schema);
    await dataSource.query('CREATE TABLE accounts (id text PRIMARY KEY, balance integer NOT NULL)');
    await dataSource.query('CREATE TABLE oncall (id text PRIMARY KEY, on_call boolean NOT NULL)');
    fixture = await startTransactionalRoutesApp(dataSource, { cls: false, logger: logs });
  });
  afterAll(async () => {
    await fixture?.app.close();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  it('a write through a plain repository during a transactional route is reported, naming the route (it commits on a connection of its own)', async () => {
    const ref = randomUUID();
    logs.entries.length = 0;
    expect((await post(fixture, '/outside', randomUUID(), { ref })).status).toBe(201);
    const warnings = logs.at('warn').filter((text) => text.includes('outside its idempotency transaction'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/Transactional route effects\.outside: a write to tx_effects/);
  });

  it('with outsideWrites: throw, the outside write is refused before it runs, and nothing commits', async () => {
    const strict = await startTransactionalRoutesApp(dataSource, { cls: false, store: { outsideWrites: 'throw' } });
    try {
      const ref = randomUUID();
      expect((await post(strict, '/outside', randomUUID(), { ref })).status).toBe(500);
      expect(await dataSource.getRepository(Effect).countBy({ ref })).toBe(0);
    } finally {
      await strict.app.close();
    }
  });

  it("a stronger isolation level asked inside the route fails loudly with IdempotencyIsolationError (not a silent savepoint at the route's level)", async () => {
    const res = await post(fixture, '/stronger', randomUUID(), {});
    expect(res.status).toBe(201);
    const body = (await res.json()) as { error: string; message: string };
    expect(body.error).toBe('IdempotencyIsolationError');
    expect(body.message).toMatch(/effects\.stronger: a transaction at SERIALIZABLE .* began at READ COMMITTED/);
  });

  it('two concurrent debits of 80 from 100 on a SERIALIZABLE route: one commits, the other is rolled back (503, Retry-After: 1, key freed), and its retry answers 402', async () => {
    const account = randomUUID();
    await dataSource.query('INSERT INTO accounts (id, balance) VALUES ($1, 100)', [account]);
    const keys = [randomUUID(), randomUUID()];
    const gate = randomUUID();
    const answers = await Promise.all(keys.map((key) => post(fixture, '/debit', key, { account, amount: 80, gate })));
    expect(answers.map((res) => res.status).sort()).toEqual([201, 503]);
    const refused = answers.findIndex((res) => res.status === 503);
    expect(answers[refused].headers.get('retry-after')).toBe('1');
    const retry = await post(fixture, '/debit', keys[refused], { account, amount: 80 });
    expect(retry.status).toBe(402);
    const [{ balance }] = await dataSource.query('SELECT balance FROM accounts WHERE id = $1', [account]);
    expect(balance).toBe(20);
  });

  it('a serialization failure at the COMMIT itself (the competing transaction commits after the route wrote, before its COMMIT) frees the key: 503 with Retry-After: 1, and the retry runs', async () => {
    const [mine, other] = [randomUUID(), randomUUID()];
    await dataSource.query('INSERT INTO oncall (id, on_call) VALUES ($1, true), ($2, true)', [mine, other]);
    const competitor = await connectPostgresOrFail();
    try {
      await competitor.query(`SET search_path TO "${schema}"`);
      await competitor.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
      await competitor.query('SELECT count(*) FROM oncall WHERE on_call AND id IN ($1, $2)', [mine, other]);
      const key = randomUUID();
      const gate = randomUUID();
      const answer = post(fixture, '/skew', key, { account: mine, gate });
      await fixture.gates.arrive(`${gate}:read`); // the route has read
      await waitUntil(async () => fixture.gates.arrivals(`${gate}:written`) === 1, 10_000, 'the route has written');
      // Both have read what the other writes; the competitor writes and commits first: it wins.
      await competitor.query('UPDATE oncall SET on_call = false WHERE id = $1', [other]);
      await competitor.query('COMMIT');
      void fixture.gates.arrive(`${gate}:written`); // the route returns: completion, then its COMMIT fails
      const refused = await answer;
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('1');
      const [{ on_call }] = await dataSource.query('SELECT on_call FROM oncall WHERE id = $1', [mine]);
      expect(on_call).toBe(true); // the route's write rolled back with its record
      const retry = await post(fixture, '/skew', key, { account: mine });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
    } finally {
      await competitor.end();
      // The skew route counts every on-call row: leave none behind for the next case.
      await dataSource.query('DELETE FROM oncall WHERE id IN ($1, $2)', [mine, other]);
    }
  });

  it('write skew on a SERIALIZABLE route: the transaction PostgreSQL rolls back (at its write or its COMMIT) answers 503 with Retry-After: 1, never an unknown outcome, and its retry runs at once', async () => {
    const [a, b] = [randomUUID(), randomUUID()];
    await dataSource.query('INSERT INTO oncall (id, on_call) VALUES ($1, true), ($2, true)', [a, b]);
    const keys = [randomUUID(), randomUUID()];
    const gate = randomUUID();
    const answers = await Promise.all([a, b].map((account, i) => post(fixture, '/skew', keys[i], { account, gate })));
    expect(answers.map((res) => res.status).sort()).toEqual([201, 503]);
    const refused = answers.findIndex((res) => res.status === 503);
    expect(answers[refused].headers.get('retry-after')).toBe('1');
    const retry = await post(fixture, '/skew', keys[refused], { account: [a, b][refused] });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    const [{ n }] = await dataSource.query('SELECT count(*)::int AS n FROM oncall WHERE on_call AND id IN ($1, $2)', [
      a,
      b,
    ]);
    expect(n).toBe(1);
  });
});
