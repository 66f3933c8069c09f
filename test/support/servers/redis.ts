import { Redis, type RedisOptions } from 'ioredis';

/**
 * The shared Redis of the e2e suites, at `TEST_REDIS_URL` (default `redis://127.0.0.1:6379`):
 * used by several suites at once, so each works under a key prefix of its own and never
 * FLUSHALLs. Connect-or-fail helpers name the server and how to start it. Throwaway servers
 * for tests that stop or kill Redis are in `redis-server.ts`.
 */
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** The shared Redis's URL (`TEST_REDIS_URL`). */
export function redisUrl(): string {
  return TEST_REDIS_URL;
}

/** Where a URL points, without credentials. */
function where(url: string): string {
  try {
    const { hostname, port } = new URL(url);
    return `${hostname}:${port || 6379}`;
  } catch {
    return 'TEST_REDIS_URL (unparseable)';
  }
}

/**
 * A connected client (the caller closes it with `quit()`), or an error that names the server
 * and how to start it. Commands fail fast: no retries, 2 s timeouts.
 */
export async function openRedis(url: string = redisUrl(), options: RedisOptions = {}): Promise<Redis> {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 2_000,
    commandTimeout: 2_000,
    maxRetriesPerRequest: 0,
    retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
    ...options,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.ping();
    return client;
  } catch (error) {
    client.disconnect();
    throw new Error(
      `Redis not reachable at ${where(url)}: start it (see README, "Running the tests": ` +
        '`docker compose up -d redis`, or `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" ' +
        `--appendonly no\`). Cause: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/**
 * Fails loudly, naming the server and how to start it, when Redis does not answer a PING.
 * Leaves no connection open.
 */
export async function connectRedisOrFail(url: string = redisUrl()): Promise<void> {
  const client = await openRedis(url);
  await client.quit();
}

/** Deletes every key that starts with `prefix` (SCAN, never KEYS or FLUSHALL). */
export async function deleteKeys(client: Redis, prefix: string): Promise<number> {
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`, 'COUNT', 1000);
    if (keys.length > 0) deleted += await client.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  return deleted;
}
