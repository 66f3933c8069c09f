import { jest } from '@jest/globals';
import { Socket } from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { openRedis } from '../support/servers/redis.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';

const claimOf = () => ({
  ownerToken: randomBytes(16).toString('base64url'),
  fingerprint: 'fp',
  leaseMs: 30_000,
  ttlMs: 60_000,
});

/** Socket writes (`_write` and `_writev` calls) of `socket` while `work` runs, with their chunk counts. */
async function writesOf(socket: Socket, work: () => Promise<unknown>): Promise<number[]> {
  const writes: number[] = [];
  const single = jest.spyOn(socket, '_write').mockImplementation(function (this: Socket, ...args) {
    writes.push(1);
    return Socket.prototype._write.apply(this, args);
  });
  const vectored = jest.spyOn(socket, '_writev').mockImplementation(function (this: Socket, chunks, callback) {
    writes.push(chunks.length);
    return Socket.prototype._writev!.call(this, chunks, callback);
  });
  try {
    await work();
  } finally {
    single.mockRestore();
    vectored.mockRestore();
  }
  return writes;
}

/**
 * A store that owns its client holds the socket writes of one event-loop iteration and sends
 * them in one system call; a client passed in keeps its own write behaviour.
 */
describe('RedisIdempotencyStore: coalesced socket writes', () => {
  let redis: ThrowawayRedis;

  beforeAll(async () => {
    redis = await startRedisServer();
  });

  afterAll(async () => {
    await redis?.stop();
  });

  it('sends the commands of one event-loop iteration in one write, and each gets its own answer', async () => {
    const store = new RedisIdempotencyStore(redis.url, { prefix: 'coalesce' });
    await store.onModuleInit();
    try {
      const keys = [randomUUID(), randomUUID(), randomUUID()];
      // Warm-up: the first call of a script may send its source (EVAL) before EVALSHA is known.
      await store.claim(randomUUID(), claimOf());
      const socket = (store.client as unknown as { stream: Socket }).stream;
      let results: Awaited<ReturnType<RedisIdempotencyStore['claim']>>[] = [];
      const writes = await writesOf(socket, async () => {
        // Three requests' claims, issued from three callbacks of the same iteration.
        const pending = await new Promise<Promise<Awaited<ReturnType<RedisIdempotencyStore['claim']>>>[]>((resolve) => {
          const issued: Promise<Awaited<ReturnType<RedisIdempotencyStore['claim']>>>[] = [];
          for (const key of keys) {
            setTimeout(() => {
              issued.push(store.claim(key, claimOf()));
              if (issued.length === keys.length) resolve(issued);
            }, 0);
          }
        });
        results = await Promise.all(pending);
      });
      expect(writes).toEqual([3]);
      expect(results.map((result) => result.kind)).toEqual(['claimed', 'claimed', 'claimed']);
      // Each answer is its own record's: the second claim of a key finds the first.
      const again = await store.claim(keys[1]!, claimOf());
      expect(again.kind).toBe('existing');
    } finally {
      await store.onApplicationShutdown();
    }
  });

  it('leaves the writes of a client passed in as they are', async () => {
    const client = await openRedis(redis.url);
    const store = new RedisIdempotencyStore(client, { prefix: 'coalesce-own' });
    await store.onModuleInit();
    try {
      await store.claim(randomUUID(), claimOf());
      const writes = await writesOf(client.stream as Socket, () =>
        Promise.all([store.claim(randomUUID(), claimOf()), store.claim(randomUUID(), claimOf())]),
      );
      expect(writes).toEqual([1, 1]);
    } finally {
      await store.onApplicationShutdown();
      await client.quit();
    }
  });
});
