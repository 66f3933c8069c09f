import { randomUUID } from 'node:crypto';
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
 * Under SERIALIZABLE (and REPEATABLE READ), the idempotency table must not make requests with
 * different keys conflict (issue 24): each request claims its key as the first statement of its
 * transaction, writes one business row of its own, completes the record and commits, all at
 * once. The number of serialization failures among them is what docs/durable-tier.md reports.
 */
const REQUESTS = 16;
const ROUNDS = 5;

describe.each(['SERIALIZABLE', 'REPEATABLE READ'] as const)(
  '%s DataSource, concurrent different keys (PostgreSQL)',
  (level) => {
    let schema: string;
    let dataSource: DataSource;
    let store: TypeOrmIdempotencyStore;

    beforeAll(async () => {
      await (await connectPostgresOrFail()).end();
      schema = await createThrowawaySchema('tx_ssi');
      dataSource = await new DataSource({
        type: 'postgres',
        url: TEST_DATABASE_URL,
        schema,
        extra: { options: `-c search_path=${schema}`, max: REQUESTS + 2 },
        entities: IDEMPOTENCY_TYPEORM_ENTITIES,
        migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
        isolationLevel: level,
      }).initialize();
      await dataSource.runMigrations();
      await dataSource.query('CREATE TABLE ledger (id uuid PRIMARY KEY, amount integer NOT NULL)');
      store = new TypeOrmIdempotencyStore(dataSource);
    });
    afterAll(async () => {
      await dataSource?.destroy();
      if (schema) await dropSchema(schema);
    });

    /** One request: claim, business write, completion, COMMIT. 'conflict' when PostgreSQL rolled it back. */
    const request = async (arrived: () => Promise<void>): Promise<'committed' | 'conflict'> => {
      const opened = await store.claimInTransaction(randomUUID(), {
        ownerToken: randomUUID(),
        fingerprint: 'f',
        leaseMs: 30_000,
        ttlMs: 60_000,
      });
      if (opened.kind !== 'claimed') throw new Error(`expected claimed, got ${opened.kind}`);
      const { transaction } = opened;
      try {
        await transaction.savepoint();
        const manager = transaction.manager as DataSource['manager'];
        await manager.query('INSERT INTO ledger (id, amount) VALUES ($1, 1)', [randomUUID()]);
        // Every request has claimed and written before any completes: their transactions overlap.
        await arrived();
        if (!(await transaction.complete({ statusCode: 201, headers: {}, body: Buffer.from('{}') }))) {
          throw new Error('completion refused');
        }
        await transaction.commit();
        return 'committed';
      } catch (error) {
        if (store.isSerializationFailure(error)) return 'conflict';
        throw error;
      } finally {
        await transaction.rollback();
      }
    };

    it(`${REQUESTS} overlapping requests with different keys, ${ROUNDS} rounds: none is rolled back by a serialization failure`, async () => {
      let conflicts = 0;
      for (let round = 0; round < ROUNDS; round += 1) {
        let count = 0;
        let open!: () => void;
        const all = new Promise<void>((resolve) => (open = resolve));
        const arrived = () => {
          count += 1;
          if (count === REQUESTS) open();
          return all;
        };
        const results = await Promise.all(Array.from({ length: REQUESTS }, () => request(arrived)));
        conflicts += results.filter((result) => result === 'conflict').length;
      }
      // The figure docs/durable-tier.md quotes (before: the claim's INSERT ... ON CONFLICT and the
      // completion's UPDATE by key took SSI locks on the key index's pages).
      process.stdout.write(
        `[serializable-claims] ${level}: ${conflicts} of ${REQUESTS * ROUNDS} requests failed with 40001\n`,
      );
      expect(conflicts).toBe(0);
    });
  },
);
