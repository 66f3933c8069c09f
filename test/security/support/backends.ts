import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import { MemoryIdempotencyStore, type IdempotencyStore, type StoredResponse } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { openIdempotencyDataSource } from '../../support/servers/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../../support/servers/postgres.js';
import { deleteKeys, openRedis, redisUrl } from '../../support/servers/redis.js';
import { postgresStoredBytes, recordBytes, redisStoredBytes, type StoredBytes } from './stored-bytes.js';

export type BackendName = 'memory' | 'redis' | 'postgres';

/** One backend under test: where records live, how to read their raw bytes and how to damage one. */
export interface Backend {
  route: string;
  operation: string;
  /** The fast store for a (re)started app; the records it sees survive restarts, except the memory fast tier in front of PostgreSQL. */
  store(): IdempotencyStore;
  durableStore?: TypeOrmIdempotencyStore;
  /** Everything stored, as bytes: every record on Redis (raw and decoded) and PostgreSQL, the live records among `ids` in memory. */
  stored(ids: string[]): Promise<StoredBytes[]>;
  /** The stored (sealed) response of one record. */
  storedResponse(id: string): Promise<StoredResponse | undefined>;
  /** Flips one byte of the stored ciphertext in place, or undefined when the backend cannot be written raw. */
  tamper?(id: string): Promise<void>;
}

function flipLastByte(bytes: Buffer): Buffer {
  const copy = Buffer.from(bytes);
  copy[copy.length - 1] ^= 0x01;
  return copy;
}

function memoryBackend(): Backend {
  const store = new MemoryIdempotencyStore();
  return {
    route: '/secrets',
    operation: 'secrets.create',
    store: () => store,
    stored: async (ids) => {
      const found = await Promise.all(ids.map(async (id) => [id, await store.get(id)] as const));
      return found.flatMap(([id, record]) => (record ? [recordBytes(id, record)] : []));
    },
    storedResponse: async (id) => (await store.get(id))?.response,
  };
}

function redisBackend(client: Redis, prefix: string): Backend {
  const store = () => new RedisIdempotencyStore(redisUrl(), { prefix });
  const inspector = new RedisIdempotencyStore(client, { prefix });
  return {
    route: '/secrets',
    operation: 'secrets.create',
    store,
    // The raw bytes and the record as the store decodes it: a completed record's headers and body
    // are compressed in Redis, so the raw bytes alone would hide plaintext from the search.
    stored: async () =>
      Promise.all(
        (await redisStoredBytes(client, prefix)).map(async ({ name, bytes }) => {
          const id = /\{([0-9a-f]+)\}/.exec(name)?.[1];
          const record = id ? await inspector.get(id).catch(() => undefined) : undefined;
          return { name, bytes: record ? Buffer.concat([bytes, recordBytes(name, record).bytes]) : bytes };
        }),
      ),
    storedResponse: async (id) => (await inspector.get(id))?.response,
    tamper: async (id) => {
      const key = `${prefix}:{${id}}`;
      await client.set(key, flipLastByte((await client.getBuffer(key))!), 'KEEPTTL');
    },
  };
}

function postgresBackend(dataSource: DataSource): Backend {
  const durableStore = new TypeOrmIdempotencyStore(dataSource);
  return {
    route: '/secrets/durable',
    operation: 'secrets.durable',
    // A fresh fast tier on each start: a restarted app reads the durable row.
    store: () => new MemoryIdempotencyStore(),
    durableStore,
    stored: () => postgresStoredBytes(dataSource),
    storedResponse: async (id) => (await durableStore.get(id))?.response,
    tamper: async (id) => {
      const [row] = await dataSource.query('SELECT response_body FROM idempotency_records WHERE key = $1', [id]);
      await dataSource.query('UPDATE idempotency_records SET response_body = $2 WHERE key = $1', [
        id,
        flipLastByte(row.response_body),
      ]);
    },
  };
}

/**
 * Opens a backend on real servers (Redis under a prefix of its own, PostgreSQL in a throwaway
 * schema); `close` removes what it created.
 */
export async function openBackend(
  name: BackendName,
  label: string,
): Promise<{ backend: Backend; close(): Promise<void> }> {
  if (name === 'memory') return { backend: memoryBackend(), close: async () => undefined };
  if (name === 'redis') {
    const client = await openRedis();
    const prefix = `idem-${label}-${randomUUID().slice(0, 8)}`;
    return {
      backend: redisBackend(client, prefix),
      close: async () => {
        await deleteKeys(client, `${prefix}:`);
        await client.quit();
      },
    };
  }
  await (await connectPostgresOrFail()).end();
  const schema = await createThrowawaySchema(label.replaceAll('-', '_'));
  const dataSource = await openIdempotencyDataSource(schema);
  return {
    backend: postgresBackend(dataSource),
    close: async () => {
      await dataSource.destroy();
      await dropSchema(schema);
    },
  };
}
