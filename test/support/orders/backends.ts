import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectPostgresOrFail, dropSchema, TEST_DATABASE_URL, throwawaySchemaName } from '../servers/postgres.js';
import { connectRedisOrFail, TEST_REDIS_URL } from '../servers/redis.js';

/** The backends the orders service's suites run on: PostgreSQL + Redis, and the embedded defaults. */

export interface Backend {
  env: NodeJS.ProcessEnv;
  usesRedis: boolean;
  tearDown(): Promise<void>;
}

/** The two ways the service runs: on the servers, and on the embedded defaults. */
export const backends: [string, () => Promise<Backend>][] = [
  [
    'PostgreSQL (own schema) + Redis',
    async () => {
      await (await connectPostgresOrFail()).end();
      await connectRedisOrFail();
      const schema = throwawaySchemaName('orders_e2e');
      return {
        // The queue under a prefix of its own: suites share this Redis, not their schemas.
        env: {
          DATABASE_URL: TEST_DATABASE_URL,
          DATABASE_SCHEMA: schema,
          REDIS_URL: TEST_REDIS_URL,
          QUEUE_PREFIX: `bull-${schema}`,
        },
        usesRedis: true,
        tearDown: () => dropSchema(schema),
      };
    },
  ],
  [
    'embedded defaults (sql.js in a temp dir, in-memory store)',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'orders-e2e-'));
      return { env: { DATA_DIR: dir }, usesRedis: false, tearDown: () => rm(dir, { recursive: true, force: true }) };
    },
  ],
];
