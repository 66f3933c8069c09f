import type pg from 'pg';
import { sendTogether, type PgClient } from '../../libs/idempotency/src/typeorm/pg-pipeline.js';
import { connectPostgresOrFail } from '../support/servers/postgres.js';

/**
 * `sendTogether`, the TypeORM store's batches of statements (a transactional route's BEGIN with
 * the claim and the savepoint, its completion with the COMMIT), on a real PostgreSQL: with
 * node-postgres' pipeline mode, and as an older node-postgres without it runs them (one after
 * another), the same outcomes, and the client is left as the batch found it.
 */
describe('sendTogether (node-postgres pipeline mode)', () => {
  let client: pg.Client;

  beforeEach(async () => {
    client = await connectPostgresOrFail();
  });
  afterEach(async () => {
    await client?.end();
  });

  const modes: Array<[string, (client: pg.Client) => PgClient]> = [
    ['pipelined', (c) => c as unknown as PgClient],
    [
      'one after another (a node-postgres without pipeline mode)',
      (c) => {
        delete (c as { pipeline?: boolean }).pipeline;
        return c as unknown as PgClient;
      },
    ],
    [
      'one after another (a node-postgres whose pipeline is read-only: it is not written to)',
      (c) => {
        Object.defineProperty(c, 'pipeline', { value: false, writable: false, enumerable: true });
        return c as unknown as PgClient;
      },
    ],
  ];

  describe.each(modes)('%s', (_mode, prepare) => {
    it('answers each statement in order, parameters included, and leaves the client usable', async () => {
      const target = prepare(client);
      const outcomes = await sendTogether(target, [
        ['BEGIN'],
        ['SELECT $1::int + 1 AS n', [41]],
        ['SAVEPOINT s'],
        ['COMMIT'],
      ]);
      expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled']);
      expect(outcomes[1]!.status === 'fulfilled' && outcomes[1]!.value.rows).toEqual([{ n: 42 }]);
      expect(outcomes[3]!.status === 'fulfilled' && outcomes[3]!.value.command).toBe('COMMIT');
      expect((client as unknown as { pipeline?: boolean }).pipeline).not.toBe(true);
      expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    });

    it('a failed statement aborts the transaction: the next fails, and the COMMIT behind them answers ROLLBACK', async () => {
      const target = prepare(client);
      await client.query('CREATE TEMPORARY TABLE pipeline_effects (n int)');
      const outcomes = await sendTogether(target, [
        ['BEGIN'],
        ['INSERT INTO pipeline_effects VALUES ($1)', [1]],
        ['SELECT 1 / $1::int', [0]],
        ['SAVEPOINT s'],
        ['COMMIT'],
      ]);
      expect(outcomes.map((outcome) => outcome.status)).toEqual([
        'fulfilled',
        'fulfilled',
        'rejected',
        'rejected',
        'fulfilled',
      ]);
      const code = (outcome: PromiseSettledResult<unknown>) =>
        outcome.status === 'rejected' ? (outcome.reason as { code?: string }).code : undefined;
      expect(code(outcomes[2]!)).toBe('22012');
      expect(code(outcomes[3]!)).toBe('25P02');
      expect(outcomes[4]!.status === 'fulfilled' && outcomes[4]!.value.command).toBe('ROLLBACK');
      expect((await client.query('SELECT count(*)::int AS n FROM pipeline_effects')).rows).toEqual([{ n: 0 }]);
    });

    it('a statement the client fails before sending it (a parameter it cannot serialize) stops the batch: the COMMIT behind it is not sent, nothing commits', async () => {
      const target = prepare(client);
      await client.query('CREATE TEMPORARY TABLE pipeline_unsent (n int)');
      const unserializable = {
        toPostgres: () => {
          throw new Error('cannot serialize');
        },
      };
      const outcomes = await sendTogether(target, [
        ['BEGIN'],
        ['INSERT INTO pipeline_unsent VALUES ($1)', [1]],
        ['SELECT $1::text AS t', [unserializable]],
        ['COMMIT'],
      ]);
      expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'rejected']);
      expect(outcomes[2]!.status === 'rejected' && (outcomes[2]!.reason as Error).message).toBe('cannot serialize');
      await client.query('ROLLBACK');
      expect((await client.query('SELECT count(*)::int AS n FROM pipeline_unsent')).rows).toEqual([{ n: 0 }]);
    });
  });
});
