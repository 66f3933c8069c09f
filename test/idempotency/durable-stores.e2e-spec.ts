import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdtempSync, rmSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DataSource, type DataSourceOptions, type EntityManager } from 'typeorm';
import {
  DurableIdempotencyStore,
  IdempotencyConfigurationError,
  IdempotencyIsolationError,
  IdempotencyStoreError,
  type ClaimRequest,
  type DurableTransaction,
  type StoredResponse,
} from 'nestjs-idempotency';
import {
  AddIdempotencyRecordsInProgressIndex1764150000000,
  CreateIdempotencyRecords1764100000000,
  IDEMPOTENCY_RECORDS_EXPIRES_INDEX,
  IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX,
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
  IdempotencyRecordEntity,
  MysqlIdempotencyRecordEntity,
  SqliteIdempotencyRecordEntity,
  TypeOrmIdempotencyStore,
  idempotencyTypeOrmEntities,
  type TypeOrmIdempotencyStoreOptions,
} from 'nestjs-idempotency/typeorm';
import {
  TEST_DATABASE_URL,
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  queryTestDatabase,
} from '../support/servers/postgres.js';
import {
  NON_UTF8_BODY,
  claimRequest,
  describeDurableStoreContract,
  newId,
  newToken,
  sampleResponse,
  type DurableStoreUnderTest,
  type RowDamage,
} from 'nestjs-idempotency/testing';
import { sleep } from '../support/timing.js';
import {
  connectMariadbOrFail,
  createMariadbDatabase,
  dropMariadbDatabase,
  mariadbUrl,
  queryMariadb,
} from '../support/servers/mariadb.js';

/** "Fast": an unreachable database answers with an error well within a request's budget. */
const FAST_MS = 2_000;

type Dialect = 'postgres' | 'sqljs' | 'mysql';

/** Raw test SQL, written for PostgreSQL: sql.js is given `?1`, MySQL `?` and a backquoted `key`. */
const placeholders = (dialect: Dialect, sql: string): string => {
  if (dialect === 'postgres') return sql;
  if (dialect === 'sqljs') return sql.replace(/\$(\d+)/g, '?$1');
  return sql.replaceAll('"key"', '`key`').replace(/\$\d+/g, '?');
};

const DAMAGE_SQL: Record<RowDamage, string> = {
  'unknown state': `SET state = 'done'`,
  'fencing token 0': 'SET fencing_token = 0',
  'lease beyond 2^53 (not a safe integer)': 'SET lease_expires_at_ms = 1152921504606846976',
  'empty owner token': `SET owner_token = ''`,
  'in-progress row holding a response': `SET response_status = 200, response_headers = '{}'`,
  'completed row whose headers are not JSON': `SET state = 'completed', response_status = 200, response_headers = '{"a": '`,
  'completed row whose headers are a JSON array': `SET state = 'completed', response_status = 200, response_headers = '["a"]'`,
  'completed row with status code 42': `SET state = 'completed', response_status = 42, response_headers = '{}'`,
};

/**
 * Runs database work one piece at a time, in call order, as an application serializes work on
 * its single sql.js connection; work started from inside running work (same async context) runs
 * at once instead of waiting for itself.
 */
class Serializer {
  private readonly inside = new AsyncLocalStorage<true>();
  private tail: Promise<unknown> = Promise.resolve();

  run = <T>(work: () => Promise<T>): Promise<T> => {
    if (this.inside.getStore()) return work();
    const run = this.tail.then(() => this.inside.run(true, work));
    this.tail = run.catch(() => undefined);
    return run;
  };
}

/** Forwards TCP to PostgreSQL until told to stop answering or to go away. */
class TcpProxy {
  private readonly sockets = new Set<net.Socket>();
  private silent = false;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const proxy = new TcpProxy(server, (server.address() as AddressInfo).port);
    server.on('connection', (client) => proxy.accept(client, target));
    return proxy;
  }

  /** Drops every connection and accepts new ones without ever answering (a hung server). */
  stopAnswering(): void {
    this.silent = true;
    this.dropConnections();
  }

  /** Drops every connection and refuses new ones (the server is gone). */
  async close(): Promise<void> {
    this.dropConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket, target: { host: string; port: number }): void {
    this.track(client);
    if (this.silent) return;
    const upstream = net.connect(target.port, target.host);
    this.track(upstream);
    client.pipe(upstream).pipe(client);
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ]) {
      a.on('error', () => b.destroy());
      a.on('close', () => b.destroy());
    }
  }

  private track(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
  }

  private dropConnections(): void {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }
}

async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function postgresOptions(schema: string, overrides: Partial<DataSourceOptions> = {}): DataSourceOptions {
  return {
    type: 'postgres',
    url: TEST_DATABASE_URL,
    schema,
    entities: IDEMPOTENCY_TYPEORM_ENTITIES,
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
    extra: { options: `-c search_path=${schema}`, connectionTimeoutMillis: 3_000 },
    logging: false,
    ...overrides,
  } as DataSourceOptions;
}

function sqljsOptions(overrides: Partial<DataSourceOptions> = {}): DataSourceOptions {
  return {
    type: 'sqljs',
    entities: idempotencyTypeOrmEntities('sqljs'),
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
    logging: false,
    ...overrides,
  } as DataSourceOptions;
}

function mariadbOptions(database: string, overrides: Partial<DataSourceOptions> = {}): DataSourceOptions {
  return {
    type: 'mariadb',
    url: mariadbUrl(database),
    entities: idempotencyTypeOrmEntities('mariadb'),
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
    connectTimeout: 3_000,
    logging: false,
    ...overrides,
  } as DataSourceOptions;
}

async function createBusinessTable(dataSource: DataSource): Promise<void> {
  await dataSource.query('CREATE TABLE business_rows (id varchar(64) PRIMARY KEY)');
}

/** An initialized DataSource whose migrations ran (both of them, in order) and a business table. */
async function openMigrated(options: DataSourceOptions): Promise<DataSource> {
  const dataSource = await new DataSource(options).initialize();
  expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
    'CreateIdempotencyRecords1764100000000',
    'AddIdempotencyRecordsInProgressIndex1764150000000',
  ]);
  await createBusinessTable(dataSource);
  return dataSource;
}

/** The harness of the contract over one DataSource. */
function harness(
  dialect: Dialect,
  dataSource: DataSource,
  storeOptions: TypeOrmIdempotencyStoreOptions,
  serialize: <T>(work: () => Promise<T>) => Promise<T> = (work) => work(),
): DurableStoreUnderTest {
  const store = new TypeOrmIdempotencyStore(dataSource, storeOptions);
  const query = <T = Record<string, unknown>>(sql: string, params: unknown[] = []) =>
    serialize(() => dataSource.query(placeholders(dialect, sql), params) as Promise<T[]>);
  return {
    store,
    anotherInstance: (options = {}) =>
      // One process owns an in-memory sql.js database: without a shared serializer, the
      // "other instance" must be the same store, or two queues would interleave on one connection.
      dialect === 'sqljs' && !storeOptions.runExclusive
        ? store
        : new TypeOrmIdempotencyStore(dataSource, { ...storeOptions, ...options }),
    writeBusinessRow: async (transaction: DurableTransaction, id: string) => {
      await (transaction.manager as EntityManager).query(
        placeholders(dialect, 'INSERT INTO business_rows (id) VALUES ($1)'),
        [id],
      );
    },
    businessRowExists: async (id) => (await query('SELECT id FROM business_rows WHERE id = $1', [id])).length === 1,
    countRows: async () =>
      Number((await query<{ n: number | string }>('SELECT COUNT(*) AS n FROM idempotency_records'))[0].n),
    damage: async (key, damage) => {
      await query(`UPDATE idempotency_records ${DAMAGE_SQL[damage]} WHERE "key" = $1`, [key]);
    },
    locking: dialect === 'sqljs' ? 'exclusive' : 'row-locks',
    cleanup: async () => {
      await query('DELETE FROM idempotency_records');
      await query('DELETE FROM business_rows');
    },
  };
}

/** Completes a record through the store and reads its row back through the entity's repository. */
async function expectEntityReadsStoredRecord(
  dataSource: DataSource,
  entity: typeof IdempotencyRecordEntity | typeof SqliteIdempotencyRecordEntity,
): Promise<void> {
  const store = new TypeOrmIdempotencyStore(dataSource);
  const key = newId();
  const claimed = await store.claim(key, claimRequest());
  expect(await store.complete(key, claimed.record.ownerToken, sampleResponse())).toBe(true);
  const row = await dataSource.getRepository(entity).findOneByOrFail({ key });
  const record = claimed.record;
  expect(row).toEqual(
    Object.assign(new entity(), {
      key,
      state: 'completed',
      fingerprint: record.fingerprint,
      ownerToken: record.ownerToken,
      fencingToken: 1,
      createdAtMs: record.createdAtMs,
      leaseExpiresAtMs: record.leaseExpiresAtMs,
      expiresAtMs: record.expiresAtMs,
      responseStatus: 201,
      responseHeaders: JSON.stringify(sampleResponse().headers),
      responseBody: NON_UTF8_BODY,
      responseBodyOmitted: false,
    }),
  );
  expect(Buffer.isBuffer(row.responseBody)).toBe(true);
  expect(typeof row.expiresAtMs).toBe('number');
}

async function expectDurableStoreError(promise: Promise<unknown>, message?: RegExp): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(IdempotencyStoreError);
  expect((error as IdempotencyStoreError).tier).toBe('durable');
  if (message) expect((error as Error).message).toMatch(message);
}

/** Every operation of the store, each expected to fail the same way when the database is gone. */
function everyOperation(store: TypeOrmIdempotencyStore): Array<[string, () => Promise<unknown>]> {
  const key = newId();
  return [
    ['claim', () => store.claim(key, claimRequest())],
    ['takeOver', () => store.takeOver(key, newToken(), claimRequest())],
    ['complete', () => store.complete(key, newToken(), sampleResponse())],
    ['release', () => store.release(key, newToken())],
    ['extend', () => store.extend(key, newToken(), 1_000)],
    ['get', () => store.get(key)],
    ['deleteExpired', () => store.deleteExpired(10)],
    ['transaction', () => store.transaction(key, newToken(), async () => 'ran')],
  ];
}

async function expectEveryOperationFailsFast(store: TypeOrmIdempotencyStore, message?: RegExp): Promise<void> {
  for (const [name, operation] of everyOperation(store)) {
    const started = performance.now();
    try {
      await expectDurableStoreError(operation(), message);
    } catch (error) {
      throw new Error(`${name}: ${(error as Error).message}`, { cause: error });
    }
    expect({ name, fast: performance.now() - started < FAST_MS }).toEqual({ name, fast: true });
  }
}

describe('TypeOrmIdempotencyStore on PostgreSQL', () => {
  let schema: string;
  let dataSource: DataSource;

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    schema = await createThrowawaySchema('durable');
    dataSource = new DataSource(postgresOptions(schema));
    await dataSource.initialize();
    expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
      'CreateIdempotencyRecords1764100000000',
      'AddIdempotencyRecordsInProgressIndex1764150000000',
    ]);
    await createBusinessTable(dataSource);
  });

  afterAll(async () => {
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  describeDurableStoreContract('TypeOrmIdempotencyStore (PostgreSQL)', async () => harness('postgres', dataSource, {}));

  // A third-party store that predates claimInTransaction (the optional method): the same suite passes.
  describeDurableStoreContract('a store without claimInTransaction (TypeORM on PostgreSQL, forwarded)', async () => {
    const inner = harness('postgres', dataSource, {});
    return {
      ...inner,
      store: new WithoutClaimInTransaction(inner.store),
      anotherInstance: (options) => new WithoutClaimInTransaction(inner.anotherInstance(options)),
    };
  });

  describe('schema', () => {
    afterEach(() => dataSource.query('DELETE FROM idempotency_records'));

    it('creates the declared column types, the primary key and the expiry index', async () => {
      const columns = await queryTestDatabase<{
        column_name: string;
        data_type: string;
        is_nullable: string;
        len: number | null;
      }>(
        `SELECT column_name, data_type, is_nullable, character_maximum_length AS len
           FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'idempotency_records'
           ORDER BY column_name`,
        [schema],
      );
      expect(Object.fromEntries(columns.map((c) => [c.column_name, [c.data_type, c.len, c.is_nullable]]))).toEqual({
        key: ['character varying', 64, 'NO'],
        state: ['character varying', 16, 'NO'],
        fingerprint: ['character varying', 64, 'NO'],
        owner_token: ['character varying', 64, 'NO'],
        fencing_token: ['integer', null, 'NO'],
        created_at_ms: ['bigint', null, 'NO'],
        lease_expires_at_ms: ['bigint', null, 'NO'],
        expires_at_ms: ['bigint', null, 'NO'],
        response_status: ['integer', null, 'YES'],
        response_headers: ['text', null, 'YES'],
        response_body: ['bytea', null, 'YES'],
        response_body_omitted: ['boolean', null, 'NO'],
      });
      const indexes = await queryTestDatabase<{ indexname: string; indexdef: string }>(
        `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'idempotency_records'`,
        [schema],
      );
      expect(indexes.map((i) => i.indexname).sort()).toEqual([
        IDEMPOTENCY_RECORDS_EXPIRES_INDEX,
        IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX,
        'PK_idempotency_records',
      ]);
      expect(indexes.find((i) => i.indexname === IDEMPOTENCY_RECORDS_EXPIRES_INDEX)?.indexdef).toMatch(
        /\(expires_at_ms\)/,
      );
      expect(indexes.find((i) => i.indexname === IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX)?.indexdef).toMatch(
        /\(state, created_at_ms\)/,
      );
    });

    it('matches the entity: the schema builder finds nothing to change after the migration', async () => {
      const pending = await dataSource.driver.createSchemaBuilder().log();
      expect(pending.upQueries.map((q) => q.query)).toEqual([]);
    });

    it('runs down (dropping the table and its index) and up again, in a schema of its own', async () => {
      const own = await createThrowawaySchema('durable');
      const other = new DataSource(postgresOptions(own));
      try {
        await other.initialize();
        await other.runMigrations();
        await other.undoLastMigration();
        await other.undoLastMigration();
        const tables = await queryTestDatabase(
          `SELECT 1 FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'idempotency_records'`,
          [own],
        );
        expect(tables).toHaveLength(0);
        const indexes = await queryTestDatabase<{ indexname: string }>(
          'SELECT indexname FROM pg_indexes WHERE schemaname = $1',
          [own],
        );
        expect(indexes.map((i) => i.indexname)).not.toContain(IDEMPOTENCY_RECORDS_EXPIRES_INDEX);
        expect(indexes.map((i) => i.indexname)).not.toContain('PK_idempotency_records');
        await other.runMigrations();
        const store = new TypeOrmIdempotencyStore(other);
        expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
      } finally {
        await other.destroy();
        await dropSchema(own);
      }
    });

    it('maps the table with IdempotencyRecordEntity: epoch ms as numbers, the body as a Buffer', async () => {
      await expectEntityReadsStoredRecord(dataSource, IdempotencyRecordEntity);
    });

    it('stores the body as bytea, byte for byte', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource);
      const key = newId();
      const claimed = await store.claim(key, claimRequest());
      expect(await store.complete(key, claimed.record.ownerToken, sampleResponse())).toBe(true);
      const [row] = await queryTestDatabase<{ hex: string; headers: string; omitted: boolean }>(
        `SELECT encode(response_body, 'hex') AS hex, response_headers AS headers, response_body_omitted AS omitted
           FROM "${schema}".idempotency_records WHERE "key" = $1`,
        [key],
      );
      expect(row.hex).toBe(NON_UTF8_BODY.toString('hex'));
      expect(JSON.parse(row.headers)).toEqual(sampleResponse().headers);
      expect(row.omitted).toBe(false);
    });

    it('finds its table through the DataSource schema, without a search_path', async () => {
      const plain = new DataSource(postgresOptions(schema, { extra: { connectionTimeoutMillis: 3_000 } }));
      await plain.initialize();
      try {
        expect(await plain.query('SELECT current_schema() AS s')).toEqual([{ s: 'public' }]);
        const store = new TypeOrmIdempotencyStore(plain);
        const key = newId();
        expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
        expect(
          await queryTestDatabase(`SELECT 1 FROM "${schema}".idempotency_records WHERE "key" = $1`, [key]),
        ).toHaveLength(1);
        expect(await store.deleteExpired(10, Number.MAX_SAFE_INTEGER)).toBe(1);
      } finally {
        await plain.destroy();
      }
    });

    it('answers a store error that says how to create the table when it is missing', async () => {
      const empty = await createThrowawaySchema('durable');
      const other = new DataSource(postgresOptions(empty));
      try {
        await other.initialize();
        await expectEveryOperationFailsFast(new TypeOrmIdempotencyStore(other), /IDEMPOTENCY_TYPEORM_MIGRATIONS/);
      } finally {
        await other.destroy();
        await dropSchema(empty);
      }
    });
  });

  describe('options', () => {
    afterEach(() => dataSource.query('DELETE FROM idempotency_records'));

    it('never calls runExclusive: every operation has its own pooled connection', async () => {
      let calls = 0;
      const runExclusive = <T>(work: () => Promise<T>): Promise<T> => {
        calls += 1;
        return work();
      };
      const store = new TypeOrmIdempotencyStore(dataSource, { runExclusive });
      const key = newId();
      const claimed = await store.claim(key, claimRequest());
      await store.transaction(key, claimed.record.ownerToken, async (tx) => {
        expect(await store.complete(key, claimed.record.ownerToken, sampleResponse(), tx)).toBe(true);
      });
      await store.deleteExpired(10, Number.MAX_SAFE_INTEGER);
      expect(calls).toBe(0);
    });

    it.each([0, -1, 1.5, Number.NaN])('rejects lockTimeoutMs %p with a RangeError', (lockTimeoutMs) => {
      expect(() => new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs })).toThrow(RangeError);
    });

    it('rejects a runExclusive that is not a function with a TypeError', () => {
      const runExclusive = 'queue' as unknown as TypeOrmIdempotencyStoreOptions['runExclusive'];
      expect(() => new TypeOrmIdempotencyStore(dataSource, { runExclusive })).toThrow(TypeError);
    });
  });

  describe('when PostgreSQL cannot be reached', () => {
    afterEach(() => dataSource.query('DELETE FROM idempotency_records'));

    it('answers IdempotencyStoreError (durable), fast, on a DataSource that was destroyed', async () => {
      const other = new DataSource(postgresOptions(schema));
      await other.initialize();
      const store = new TypeOrmIdempotencyStore(other);
      expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
      await other.destroy();
      await expectEveryOperationFailsFast(store, /not initialized/);
    });

    it('answers IdempotencyStoreError (durable), fast, on a DataSource pointed at a closed port', async () => {
      const url = new URL(TEST_DATABASE_URL);
      url.port = String(await closedPort());
      const other = new DataSource(postgresOptions(schema, { url: url.toString() }));
      await expect(other.initialize()).rejects.toThrow(/ECONNREFUSED/);
      await expectEveryOperationFailsFast(new TypeOrmIdempotencyStore(other));
    });

    describe('after it answered at startup', () => {
      let proxy: TcpProxy;
      let other: DataSource;
      let store: TypeOrmIdempotencyStore;

      beforeEach(async () => {
        const target = new URL(TEST_DATABASE_URL);
        proxy = await TcpProxy.start({ host: target.hostname, port: Number(target.port || 5432) });
        const url = new URL(TEST_DATABASE_URL);
        url.port = String(proxy.port);
        other = new DataSource(
          postgresOptions(schema, {
            url: url.toString(),
            extra: { options: `-c search_path=${schema}`, connectionTimeoutMillis: 500 },
          }),
        );
        await other.initialize();
        store = new TypeOrmIdempotencyStore(other);
        expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
      });

      afterEach(async () => {
        await proxy.close();
        await other.destroy().catch(() => undefined);
      });

      it('answers IdempotencyStoreError (durable), fast, once the server is gone', async () => {
        await proxy.close();
        await expectEveryOperationFailsFast(store, /Make sure the database is reachable/);
      });

      it('answers IdempotencyStoreError (durable) after connectionTimeoutMillis when the server stops answering', async () => {
        proxy.stopAnswering();
        await sleep(50);
        await expectEveryOperationFailsFast(store);
      });

      it('answers a store error and commits nothing when the connection drops inside the transaction', async () => {
        const key = newId();
        const claimed = await store.claim(key, claimRequest());
        const work = async (transaction: DurableTransaction) => {
          proxy.stopAnswering();
          return store.complete(key, claimed.record.ownerToken, sampleResponse(), transaction);
        };
        await expectDurableStoreError(store.transaction(key, claimed.record.ownerToken, work));
        expect(await new TypeOrmIdempotencyStore(dataSource).get(key)).toEqual(claimed.record);
      });
    });
  });

  describe('transaction handles', () => {
    afterEach(() => dataSource.query('DELETE FROM idempotency_records'));

    it('refuses complete() with a handle whose work has settled, or one it never gave out (TypeError)', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource);
      const key = newId();
      const claimed = await store.claim(key, claimRequest());
      let kept: DurableTransaction | undefined;
      await store.transaction(key, claimed.record.ownerToken, async (tx) => {
        kept = tx;
      });
      await expect(store.complete(key, claimed.record.ownerToken, sampleResponse(), kept)).rejects.toThrow(TypeError);
      const forged: DurableTransaction = { manager: dataSource.manager };
      await expect(store.complete(key, claimed.record.ownerToken, sampleResponse(), forged)).rejects.toThrow(TypeError);
      expect(await store.get(key)).toEqual(claimed.record);
    });
  });
});

describe('TypeOrmIdempotencyStore on PostgreSQL, partitioned table', () => {
  /** The narrowest partitions the store takes: the drop cases watch one fill, pass and go. */
  const PARTITION_MS = 1_000;
  let schema: string;
  let dataSource: DataSource;

  beforeAll(async () => {
    schema = await createThrowawaySchema('durable_partitioned');
    dataSource = new DataSource(postgresOptions(schema, { migrations: IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS }));
    await dataSource.initialize();
    expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
      'CreatePartitionedIdempotencyRecords1764160000000',
    ]);
    await createBusinessTable(dataSource);
  });

  afterAll(async () => {
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  describeDurableStoreContract(
    'TypeOrmIdempotencyStore (PostgreSQL, partitioned)',
    async () => {
      const partitioned = harness('postgres', dataSource, { partitioning: { partitionMs: PARTITION_MS } });
      return {
        ...partitioned,
        cleanup: async () => {
          await partitioned.cleanup();
          // The past partitions, emptied, go: claims read every attached one.
          await partitioned.store.deleteExpired(1);
        },
      };
    },
    undefined,
    { expiry: { partitionMs: PARTITION_MS }, claimIsolation: 'read-committed' },
  );
});

describe.each([
  ['its own queue', false],
  ["the application's serializer (runExclusive)", true],
])('TypeOrmIdempotencyStore on sql.js, serialized by %s', (_name, shared) => {
  let dataSource: DataSource;
  let serializer: Serializer | undefined;

  beforeAll(async () => {
    dataSource = new DataSource(sqljsOptions());
    await dataSource.initialize();
    expect((await dataSource.runMigrations()).map((m) => m.name)).toEqual([
      'CreateIdempotencyRecords1764100000000',
      'AddIdempotencyRecordsInProgressIndex1764150000000',
    ]);
    await createBusinessTable(dataSource);
  });

  afterAll(async () => {
    await dataSource?.destroy();
  });

  describeDurableStoreContract(
    `TypeOrmIdempotencyStore (sql.js, ${shared ? 'runExclusive' : 'own queue'})`,
    async () => {
      serializer = shared ? new Serializer() : undefined;
      return harness('sqljs', dataSource, serializer ? { runExclusive: serializer.run } : {}, serializer?.run);
    },
  );
});

describe('TypeOrmIdempotencyStore on sql.js: specifics', () => {
  let dataSource: DataSource;

  beforeEach(async () => {
    dataSource = new DataSource(sqljsOptions());
    await dataSource.initialize();
    await dataSource.runMigrations();
    await createBusinessTable(dataSource);
  });

  afterEach(async () => {
    if (dataSource.isInitialized) await dataSource.destroy();
  });

  it('matches the entity: the schema builder finds nothing to change after the migration', async () => {
    const pending = await dataSource.driver.createSchemaBuilder().log();
    expect(pending.upQueries.map((q) => q.query)).toEqual([]);
  });

  it('maps the table with SqliteIdempotencyRecordEntity: epoch ms as numbers, the body as a Buffer', async () => {
    await expectEntityReadsStoredRecord(dataSource, SqliteIdempotencyRecordEntity);
  });

  it('runs down (dropping the index, then the table) and up again', async () => {
    await dataSource.undoLastMigration();
    expect(
      await dataSource.query(`SELECT name FROM sqlite_master WHERE name = '${IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX}'`),
    ).toEqual([]);
    await dataSource.undoLastMigration();
    expect(await dataSource.query(`SELECT name FROM sqlite_master WHERE name LIKE '%idempotency%'`)).toEqual([]);
    await dataSource.runMigrations();
    expect((await new TypeOrmIdempotencyStore(dataSource).claim(newId(), claimRequest())).kind).toBe('claimed');
  });

  it('runs every operation through runExclusive, except complete() inside the transaction it already holds', async () => {
    const names: string[] = [];
    // Not re-entrant on purpose: a call that queued behind the running transaction would deadlock.
    let tail: Promise<unknown> = Promise.resolve();
    const runExclusive = <T>(work: () => Promise<T>): Promise<T> => {
      names.push('section');
      const run = tail.then(work);
      tail = run.catch(() => undefined);
      return run;
    };
    const store = new TypeOrmIdempotencyStore(dataSource, { runExclusive });
    const key = newId();
    const claimed = await store.claim(key, claimRequest({ leaseMs: 1_000 }));
    await store.takeOver(key, newToken(), claimRequest());
    await store.extend(key, claimed.record.ownerToken, 1_000);
    await store.get(key);
    await store.transaction(key, claimed.record.ownerToken, async (tx) => {
      expect(await store.complete(key, claimed.record.ownerToken, sampleResponse(), tx)).toBe(true);
    });
    await store.complete(newId(), newToken(), sampleResponse());
    await store.release(newId(), newToken());
    await store.deleteExpired(10);
    expect(names).toHaveLength(8);
    expect((await store.get(key))?.state).toBe('completed');
  });

  it("serializes the store with the application's own transactions when they share runExclusive", async () => {
    const serializer = new Serializer();
    const store = new TypeOrmIdempotencyStore(dataSource, { runExclusive: serializer.run });
    const appTransaction = serializer.run(() =>
      dataSource.transaction(async (manager) => {
        await manager.query('INSERT INTO business_rows (id) VALUES (?)', ['app']);
        await sleep(100);
        throw new Error('the application rolls back');
      }),
    );
    const key = newId();
    const claim = store.claim(key, claimRequest());
    await expect(appTransaction).rejects.toThrow('the application rolls back');
    expect((await claim).kind).toBe('claimed');
    expect(await store.get(key)).toEqual((await claim).record);
    expect(await dataSource.query('SELECT id FROM business_rows')).toEqual([]);
  });

  it.each([
    ['created_at_ms holding text', `SET created_at_ms = 'soon'`],
    ['expires_at_ms holding a fraction', 'SET lease_expires_at_ms = 1.5'],
    ['fencing_token holding text', `SET fencing_token = 'one'`],
    ['response_body_omitted holding 2', 'SET response_body_omitted = 2'],
  ])('refuses a row with %s (IdempotencyStoreError)', async (_name, damage) => {
    const store = new TypeOrmIdempotencyStore(dataSource);
    const key = newId();
    await store.claim(key, claimRequest());
    await dataSource.query(`UPDATE idempotency_records ${damage} WHERE "key" = ?`, [key]);
    await expectDurableStoreError(store.get(key), /unreadable/);
  });

  it('refuses a completed row whose body is text, not bytes (IdempotencyStoreError)', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource);
    const key = newId();
    const claimed = await store.claim(key, claimRequest());
    expect(await store.complete(key, claimed.record.ownerToken, sampleResponse())).toBe(true);
    await dataSource.query(`UPDATE idempotency_records SET response_body = 'text' WHERE "key" = ?`, [key]);
    await expectDurableStoreError(store.get(key), /response_body/);
  });

  it('keeps a completed record across a restart of a file-backed database, byte for byte', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'durable-sqljs-'));
    const location = join(directory, 'idempotency.sqlite');
    try {
      const first = new DataSource(sqljsOptions({ location, autoSave: true }));
      await first.initialize();
      await first.runMigrations();
      const store = new TypeOrmIdempotencyStore(first);
      const key = newId();
      const claimed = await store.claim(key, claimRequest());
      await store.transaction(key, claimed.record.ownerToken, async (tx) => {
        expect(await store.complete(key, claimed.record.ownerToken, sampleResponse(), tx)).toBe(true);
      });
      const record = await store.get(key);
      await first.destroy();

      const second = new DataSource(sqljsOptions({ location, autoSave: true }));
      await second.initialize();
      try {
        expect(await second.runMigrations()).toEqual([]);
        const reopened = await new TypeOrmIdempotencyStore(second).get(key);
        expect(reopened).toEqual(record);
        expect(reopened?.response?.body?.equals(NON_UTF8_BODY)).toBe(true);
      } finally {
        await second.destroy();
      }
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it('answers a store error that says how to create the table when it is missing', async () => {
    const bare = new DataSource(sqljsOptions());
    await bare.initialize();
    try {
      await expectEveryOperationFailsFast(new TypeOrmIdempotencyStore(bare), /IDEMPOTENCY_TYPEORM_MIGRATIONS/);
    } finally {
      await bare.destroy();
    }
  });

  it('answers IdempotencyStoreError (durable) on a DataSource that is not initialized or was destroyed', async () => {
    await expectEveryOperationFailsFast(new TypeOrmIdempotencyStore(new DataSource(sqljsOptions())), /not initialized/);
    const store = new TypeOrmIdempotencyStore(dataSource);
    await dataSource.destroy();
    await expectEveryOperationFailsFast(store, /not initialized/);
  });
});

describe('TypeOrmIdempotencyStore on MariaDB (mysql2)', () => {
  let database: string;
  let dataSource: DataSource;

  beforeAll(async () => {
    await (await connectMariadbOrFail()).end();
    database = await createMariadbDatabase('durable');
    dataSource = await openMigrated(mariadbOptions(database));
  });

  afterAll(async () => {
    await dataSource?.destroy();
    if (database) await dropMariadbDatabase(database);
  });

  describeDurableStoreContract('TypeOrmIdempotencyStore (MariaDB)', async () => harness('mysql', dataSource, {}));

  describe('schema', () => {
    afterEach(() => dataSource.query('DELETE FROM idempotency_records'));

    it('creates the declared column types (binary-collated key and tokens), the primary key and both indexes', async () => {
      const columns = await queryMariadb<{ name: string; type: string; nullable: string; collation: string | null }>(
        `SELECT column_name AS name, column_type AS type, is_nullable AS nullable, collation_name AS collation
           FROM information_schema.columns WHERE table_schema = ? AND table_name = 'idempotency_records'`,
        [database],
      );
      expect(Object.fromEntries(columns.map((c) => [c.name, [c.type, c.nullable, c.collation]]))).toEqual({
        key: ['varchar(64)', 'NO', 'ascii_bin'],
        state: ['varchar(16)', 'NO', expect.any(String)],
        fingerprint: ['varchar(64)', 'NO', 'ascii_bin'],
        owner_token: ['varchar(64)', 'NO', 'ascii_bin'],
        fencing_token: [expect.stringMatching(/^int/), 'NO', null],
        created_at_ms: [expect.stringMatching(/^bigint/), 'NO', null],
        lease_expires_at_ms: [expect.stringMatching(/^bigint/), 'NO', null],
        expires_at_ms: [expect.stringMatching(/^bigint/), 'NO', null],
        response_status: [expect.stringMatching(/^int/), 'YES', null],
        response_headers: ['longtext', 'YES', expect.any(String)],
        response_body: ['longblob', 'YES', null],
        response_body_omitted: ['tinyint(1)', 'NO', null],
      });
      const indexes = await queryMariadb<{ name: string; columns: string }>(
        `SELECT index_name AS name, GROUP_CONCAT(column_name ORDER BY seq_in_index) AS columns
           FROM information_schema.statistics WHERE table_schema = ? AND table_name = 'idempotency_records'
           GROUP BY index_name ORDER BY index_name`,
        [database],
      );
      expect(indexes).toEqual([
        { name: IDEMPOTENCY_RECORDS_EXPIRES_INDEX, columns: 'expires_at_ms' },
        { name: IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX, columns: 'state,created_at_ms' },
        { name: 'PRIMARY', columns: 'key' },
      ]);
    });

    it('matches the entity: the schema builder finds nothing to change after the migration', async () => {
      const pending = await dataSource.driver.createSchemaBuilder().log();
      expect(pending.upQueries.map((q) => q.query)).toEqual([]);
    });

    it('runs down (dropping the index, then the table) and up again, in a database of its own', async () => {
      const own = await createMariadbDatabase('durable');
      const other = new DataSource(mariadbOptions(own));
      try {
        await other.initialize();
        await other.runMigrations();
        await other.undoLastMigration();
        await other.undoLastMigration();
        expect(
          await queryMariadb(
            `SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = 'idempotency_records'`,
            [own],
          ),
        ).toHaveLength(0);
        await other.runMigrations();
        expect((await new TypeOrmIdempotencyStore(other).claim(newId(), claimRequest())).kind).toBe('claimed');
      } finally {
        await other.destroy();
        await dropMariadbDatabase(own);
      }
    });

    it('maps the table with MysqlIdempotencyRecordEntity: epoch ms as numbers, the body as a Buffer', async () => {
      await expectEntityReadsStoredRecord(dataSource, MysqlIdempotencyRecordEntity);
    });

    it('stores a body larger than a blob (64 KiB) byte for byte', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource);
      const key = newId();
      const claimed = await store.claim(key, claimRequest());
      const body = Buffer.alloc(200_000, 0xfe);
      expect(await store.complete(key, claimed.record.ownerToken, sampleResponse({ body }))).toBe(true);
      expect((await store.get(key))?.response?.body?.equals(body)).toBe(true);
    });

    it('answers a store error that says how to create the table when it is missing', async () => {
      const empty = await createMariadbDatabase('durable');
      const other = new DataSource(mariadbOptions(empty));
      try {
        await other.initialize();
        await expectEveryOperationFailsFast(new TypeOrmIdempotencyStore(other), /IDEMPOTENCY_TYPEORM_MIGRATIONS/);
      } finally {
        await other.destroy();
        await dropMariadbDatabase(empty);
      }
    });
  });

  describe('InnoDB locking under concurrency (REPEATABLE READ, the server default), and the route transaction', () => {
    afterEach(() => dataSource.query('DELETE FROM idempotency_records'));

    /** Claims `key` in a transaction, holds it `holdMs`, completes and commits: what a route does. */
    const claimAndCommit = async (store: TypeOrmIdempotencyStore, key: string, holdMs: number) => {
      const result = await store.claimInTransaction(key, claimRequest());
      if (result.kind !== 'claimed') return result.kind;
      await result.transaction.savepoint();
      await sleep(holdMs);
      expect(await result.transaction.complete(sampleResponse())).toBe(true);
      await result.transaction.commit();
      return 'claimed';
    };

    it('claims of 40 different keys at once, interleaved in the same index gaps, all succeed: no lock wait, no deadlock', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 5_000 });
      // Existing rows around the new keys: every new key lands in a gap next to a committed row.
      for (const edge of ['10', '50', 'a0', 'f0']) await store.claim(`${edge}${newId().slice(2)}`, claimRequest());
      const keys = Array.from({ length: 40 }, () => newId());
      const answers = await Promise.all(keys.map((key) => claimAndCommit(store, key, 100)));
      expect(answers).toEqual(keys.map(() => 'claimed'));
      expect(await h(dataSource).countRows()).toBe(44);
    });

    it('20 claims of one key at once: exactly one runs; the others are busy or see it, none errs', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 1_000 });
      const key = newId();
      const answers = await Promise.all(Array.from({ length: 20 }, () => claimAndCommit(store, key, 300)));
      expect(answers.filter((a) => a === 'claimed')).toHaveLength(1);
      expect(answers.every((a) => ['claimed', 'busy', 'existing'].includes(a))).toBe(true);
    });

    it('waiters of a claim that rolls back: one inserts, the other is busy (InnoDB deadlock 1213) or waits for it', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 5_000 });
      const key = newId();
      const first = await store.claimInTransaction(key, claimRequest());
      if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
      const waiters = Array.from({ length: 3 }, () => claimAndCommit(store, key, 200));
      await sleep(200);
      await first.transaction.rollback();
      const answers = await Promise.all(waiters);
      expect(answers.filter((a) => a === 'claimed')).toHaveLength(1);
      expect(answers.every((a) => ['claimed', 'busy', 'existing'].includes(a))).toBe(true);
      expect((await store.get(key))?.state).toBe('completed');
    });

    it.each([
      ['the server default (REPEATABLE READ)', undefined],
      ['READ COMMITTED, asked by the route', 'READ COMMITTED' as const],
    ])(
      'refuses a stronger isolation level asked inside the route at %s (IdempotencyIsolationError); a weaker one is a savepoint',
      async (_name, isolationLevel) => {
        const store = new TypeOrmIdempotencyStore(dataSource);
        const result = await store.claimInTransaction(newId(), claimRequest(), { isolationLevel, label: 'POST /x' });
        if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
        const manager = result.transaction.manager as EntityManager;
        try {
          await expect(manager.transaction('SERIALIZABLE', async () => undefined)).rejects.toBeInstanceOf(
            IdempotencyIsolationError,
          );
          await expect(manager.transaction('READ UNCOMMITTED', async () => 'nested')).resolves.toBe('nested');
        } finally {
          await result.transaction.rollback();
        }
      },
    );

    it("outsideWrites 'throw': an entity write on another connection while the route runs is refused before it runs", async () => {
      const store = new TypeOrmIdempotencyStore(dataSource, { outsideWrites: 'throw' });
      const result = await store.claimInTransaction(newId(), claimRequest(), { label: 'POST /x' });
      if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
      const outside = newId();
      const write = () =>
        dataSource.getRepository(MysqlIdempotencyRecordEntity).insert({
          key: outside,
          state: 'in_progress',
          fingerprint: 'f',
          ownerToken: 't',
          fencingToken: 1,
          createdAtMs: 1,
          leaseExpiresAtMs: 1,
          expiresAtMs: 1,
          responseStatus: null,
          responseHeaders: null,
          responseBody: null,
          responseBodyOmitted: false,
        });
      try {
        await expect(result.transaction.run(write)).rejects.toThrow(
          /POST \/x: a write to idempotency_records ran outside/,
        );
      } finally {
        await result.transaction.rollback();
      }
      expect(await h(dataSource).countRows()).toBe(0);
    });

    it('a deadlock (1213) inside the handler is a serialization failure: the engine answers 503 and rolls back', async () => {
      const store = new TypeOrmIdempotencyStore(dataSource);
      const [a, b] = [newId(), newId()];
      await dataSource.query('INSERT INTO business_rows (id) VALUES (?), (?)', [a, b]);
      const [one, two] = await Promise.all(
        [newId(), newId()].map((key) => store.claimInTransaction(key, claimRequest())),
      );
      if (one.kind !== 'claimed' || two.kind !== 'claimed') throw new Error('expected two claims');
      const lock = (t: typeof one.transaction, id: string) =>
        (t.manager as EntityManager).query('SELECT id FROM business_rows WHERE id = ? FOR UPDATE', [id]);
      await lock(one.transaction, a);
      await lock(two.transaction, b);
      const crossed = await Promise.allSettled([lock(one.transaction, b), lock(two.transaction, a)]);
      const failure = crossed.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect(store.isSerializationFailure(failure.reason)).toBe(true);
      expect(store.isSerializationFailure(new Error('Lock wait timeout exceeded'))).toBe(false);
      await one.transaction.rollback();
      await two.transaction.rollback();
    });
  });
});

/** The harness of the MariaDB suite, for its row counts. */
const h = (dataSource: DataSource) => harness('mysql', dataSource, {});

describe('TypeORM entry point', () => {
  it('refuses a DataSource type it does not support with an IdempotencyConfigurationError', () => {
    const mssql = { options: { type: 'mssql' } } as unknown as DataSource;
    expect(() => new TypeOrmIdempotencyStore(mssql)).toThrow(IdempotencyConfigurationError);
    expect(() => idempotencyTypeOrmEntities('mssql')).toThrow(IdempotencyConfigurationError);
  });

  it('gives the entity with the right binary column for each supported type', () => {
    expect(idempotencyTypeOrmEntities('postgres')).toEqual([IdempotencyRecordEntity]);
    expect(idempotencyTypeOrmEntities('sqljs')).toEqual([SqliteIdempotencyRecordEntity]);
    expect(idempotencyTypeOrmEntities('mysql')).toEqual([MysqlIdempotencyRecordEntity]);
    expect(idempotencyTypeOrmEntities('mariadb')).toEqual([MysqlIdempotencyRecordEntity]);
    expect(IDEMPOTENCY_TYPEORM_ENTITIES).toEqual([IdempotencyRecordEntity]);
    expect(IDEMPOTENCY_TYPEORM_MIGRATIONS).toEqual([
      CreateIdempotencyRecords1764100000000,
      AddIdempotencyRecordsInProgressIndex1764150000000,
    ]);
  });
});

/** Forwards every method of `DurableIdempotencyStore` except the optional `claimInTransaction`. */
class WithoutClaimInTransaction extends DurableIdempotencyStore {
  constructor(private readonly inner: DurableIdempotencyStore) {
    super();
  }
  claim(key: string, request: ClaimRequest) {
    return this.inner.claim(key, request);
  }
  takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest) {
    return this.inner.takeOver(key, expectedOwnerToken, request);
  }
  complete(key: string, ownerToken: string, response: StoredResponse, transaction?: DurableTransaction) {
    return this.inner.complete(key, ownerToken, response, transaction);
  }
  release(key: string, ownerToken: string) {
    return this.inner.release(key, ownerToken);
  }
  extend(key: string, ownerToken: string, leaseMs: number) {
    return this.inner.extend(key, ownerToken, leaseMs);
  }
  get(key: string) {
    return this.inner.get(key);
  }
  transaction<T>(key: string, ownerToken: string, work: (transaction: DurableTransaction) => Promise<T>) {
    return this.inner.transaction(key, ownerToken, work);
  }
  deleteExpired(batchSize: number, nowMs?: number) {
    return this.inner.deleteExpired(batchSize, nowMs);
  }
  override listInProgress(olderThanMs: number, limit: number) {
    return this.inner.listInProgress(olderThanMs, limit);
  }
  override forceDelete(key: string, scope?: 'in-progress' | 'any') {
    return this.inner.forceDelete(key, scope);
  }
}
