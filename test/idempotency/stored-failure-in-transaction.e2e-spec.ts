import { Body, Controller, HttpException, Injectable, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { Idempotent, IdempotencyContext, IdempotencyContextRef, IdempotencyModule } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { send } from '../support/http/send.js';
import {
  openIdempotencyDataSource,
  openMariadbIdempotencyDataSource,
} from '../support/servers/idempotency-data-source.js';
import { connectMariadbOrFail, createMariadbDatabase, dropMariadbDatabase } from '../support/servers/mariadb.js';
import {
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  waitForLockWaiters,
} from '../support/servers/postgres.js';
import { connectRedisOrFail, deleteKeys, openRedis, redisUrl } from '../support/servers/redis.js';
import { DurableSwitchStore } from '../support/stores/durable-switch.store.js';
import { sleep } from '../support/timing.js';

/** Holds the first charge of a key at a gate, then fails it with a 402 the policy stores. */
@Injectable()
class Gates {
  runs = 0;
  readonly reached = new Map<string, () => void>();
  private readonly opened = new Map<string, Promise<void>>();
  private readonly openers = new Map<string, () => void>();

  hold(ref: string): Promise<void> {
    if (!this.opened.has(ref)) this.opened.set(ref, new Promise((resolve) => this.openers.set(ref, resolve)));
    this.reached.get(ref)?.();
    return this.opened.get(ref)!;
  }
  open(ref: string): void {
    this.openers.get(ref)?.();
  }
}

@Controller()
class ChargesController {
  constructor(private readonly gates: Gates) {}

  @Post('charges')
  @Idempotent({ durable: true, transactional: true, scope: ['operation'], leaseMs: 400, heartbeatMs: 100 })
  async charge(@Body() body: { ref: string }, @IdempotencyContext() idem: IdempotencyContextRef) {
    this.gates.runs += 1;
    const manager = idem.getManager<EntityManager>();
    await manager.query(placeholder(manager.connection, 'INSERT INTO charges (ref) VALUES ($1)'), [body.ref]);
    await this.gates.hold(body.ref);
    throw new HttpException({ message: 'card declined' }, 402);
  }
}

/** `$1` for PostgreSQL, `?` for MariaDB. */
const placeholder = (dataSource: DataSource, sql: string) =>
  dataSource.options.type === 'postgres' ? sql : sql.replace(/\$\d+/g, '?');

/**
 * The database a run of the suite uses: its DataSource, how to see a duplicate wait on the row
 * (given the store's takeovers in flight), and its removal.
 */
interface Database {
  dataSource: DataSource;
  waitersOnRecords(takeOversInFlight: () => number): Promise<number>;
  drop(): Promise<void>;
}

const DATABASES: [string, () => Promise<Database>][] = [
  [
    'PostgreSQL',
    async () => {
      await (await connectPostgresOrFail()).end();
      const schema = await createThrowawaySchema('stored_failure');
      const dataSource = await openIdempotencyDataSource(schema);
      return {
        dataSource,
        async waitersOnRecords() {
          const locker = await connectPostgresOrFail();
          try {
            return await waitForLockWaiters(locker, schema, 'idempotency_records');
          } finally {
            await locker.end();
          }
        },
        drop: () => dropSchema(schema),
      };
    },
  ],
  [
    'MariaDB',
    async () => {
      await (await connectMariadbOrFail()).end();
      const database = await createMariadbDatabase('stored_failure');
      const dataSource = await openMariadbIdempotencyDataSource(database);
      return {
        dataSource,
        // A takeover polls `FOR UPDATE NOWAIT` there (millisecond lock waits): no session is seen
        // waiting, so the wait is the store's takeover still in flight well after it began.
        async waitersOnRecords(takeOversInFlight) {
          for (let waited = 0; takeOversInFlight() === 0 && waited < 10_000; waited += 50) await sleep(50);
          await sleep(300);
          return takeOversInFlight();
        },
        drop: () => dropMariadbDatabase(database),
      };
    },
  ],
];

/**
 * The interleaving `npm run verify` found (docs/protocol-model.md, "Found and fixed"), replayed on
 * PostgreSQL and Redis: a transactional handler outlives its lease and fails with a 402 the
 * policy stores, while Redis has lost the record and a duplicate waits on the row. The 402 must
 * complete in the handler's own transaction, so the duplicate gets it replayed; before the fix it
 * took the row over once the ROLLBACK freed it, ran the handler again and answered 201.
 */
describe.each(DATABASES)(
  'a stored failure on a transactional route completes in its transaction (%s)',
  (_name, open) => {
    let database: Database;
    let dataSource: DataSource;
    let app: INestApplication;
    let url: string;
    let gates: Gates;
    let durable: DurableSwitchStore;
    let takeOversInFlight = 0;
    const prefix = `idem-sf-${randomUUID().slice(0, 8)}`;

    beforeAll(async () => {
      await connectRedisOrFail();
      database = await open();
      dataSource = database.dataSource;
      await dataSource.query('CREATE TABLE charges (ref varchar(64) NOT NULL)');
      const store = new TypeOrmIdempotencyStore(dataSource, { lockTimeoutMs: 10_000 });
      const takeOver = store.takeOver.bind(store);
      store.takeOver = async (...args) => {
        takeOversInFlight += 1;
        try {
          return await takeOver(...args);
        } finally {
          takeOversInFlight -= 1;
        }
      };
      durable = new DurableSwitchStore(store);
      // Widens the window the model found: a failure settled in a statement after the ROLLBACK.
      durable.pauseCompletionsOutsideTransactions(500);
      @Module({
        imports: [
          IdempotencyModule.forRoot({
            store: new RedisIdempotencyStore(redisUrl(), { prefix }),
            durableStore: durable,
          }),
        ],
        controllers: [ChargesController],
        providers: [Gates],
      })
      class StoredFailureModule {}
      app = await NestFactory.create(StoredFailureModule, { logger: false, rawBody: true });
      await app.listen(0, '127.0.0.1');
      url = `http://127.0.0.1:${(app.getHttpServer().address() as { port: number }).port}`;
      gates = app.get(Gates);
    });
    afterAll(async () => {
      await app?.close();
      await dataSource?.destroy();
      await database?.drop();
      const redis = await openRedis();
      await deleteKeys(redis, prefix);
      await redis.quit();
    });

    it('Redis loses the record, the lease lapses, a duplicate waits on the row: both get the 402, the handler ran once', async () => {
      const key = randomUUID();
      const ref = randomUUID();
      const charge = () => send(url, '/charges', { key, body: { ref } });
      const reached = new Promise<void>((resolve) => gates.reached.set(ref, resolve));
      const original = charge();
      await reached;
      const redis = await openRedis();
      try {
        expect(await deleteKeys(redis, prefix)).toBeGreaterThan(0); // Redis loses the record
        await sleep(900); // the committed lease (400 ms) lapses: the renewals go into the open transaction
        const duplicate = charge();
        expect(await database.waitersOnRecords(() => takeOversInFlight)).toBe(1); // it waits on the locked row
        gates.open(ref);
        const [first, second] = await Promise.all([original, duplicate]);
        expect(first.status).toBe(402);
        expect(second.status).toBe(402);
        expect(second.headers.get('idempotent-replayed')).toBe('true');
        expect(second.body.equals(first.body)).toBe(true);
        const later = await charge();
        expect(later.status).toBe(402);
        expect(later.headers.get('idempotent-replayed')).toBe('true');
        expect(gates.runs).toBe(1);
        const [{ n }] = await dataSource.query(
          placeholder(dataSource, 'SELECT count(*) AS n FROM charges WHERE ref = $1'),
          [ref],
        );
        expect(Number(n)).toBe(0);
      } finally {
        await redis.quit();
      }
    });
  },
);
