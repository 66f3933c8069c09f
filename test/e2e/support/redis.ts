import { Redis } from 'ioredis';

/** Redis for the e2e suites (override with `TEST_REDIS_URL`). */
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Resolves when Redis answers PING; otherwise fails with a message that says how to start it. */
export async function requireRedis(url: string = TEST_REDIS_URL): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, connectTimeout: 2000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.ping();
  } catch (error) {
    const { hostname, port } = new URL(url);
    throw new Error(
      `Redis not reachable at ${hostname}:${port || 6379}: start it (see README, "Running the tests": ` +
        '`docker compose up -d redis`, or `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no`). ' +
        `Cause: ${(error as Error).message}`,
    );
  } finally {
    client.disconnect();
  }
}
