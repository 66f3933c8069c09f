/**
 * The Redis store's connection lifecycle: the fail-fast options, the client the store creates
 * from a URL (owned: coalesced writes, closed on shutdown) or the one it is given (left as it
 * is), closing a connection on shutdown, and the actionable errors of failed commands (naming the
 * server, credentials redacted).
 */
import { Redis, type Cluster, type RedisOptions } from 'ioredis';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import { coalescingWritesOf } from './write-coalescing.js';

/**
 * ioredis options that make a connection fail fast, so a dead or silent Redis turns into an
 * `IdempotencyStoreError` (and a `503`) within about two seconds instead of a hanging request.
 * The store applies them, with `lazyConnect: true`, to the client it creates from a URL. When
 * you pass your own client, create it with them:
 *
 * - `connectTimeout: 2000`: a host that does not complete the TCP handshake fails after 2 s
 *   (ioredis default: 10 s);
 * - `commandTimeout: 2000`: a command without a reply after 2 s rejects (default: never), also
 *   when it waits in the offline queue for a reconnect;
 * - `maxRetriesPerRequest: 0`: commands in flight when the connection drops, and commands queued
 *   while it reconnects, reject at the next failed attempt (default: after 20 attempts);
 * - `autoResendUnfulfilledCommands: false`: a write whose fate is unknown is never sent twice;
 * - `retryStrategy`: reconnects after 100 ms, 200 ms, ... then every second, forever.
 *
 * The offline queue stays on: a command issued while a reconnect is under way is sent as soon as
 * it succeeds, or rejected when it fails.
 *
 * @example
 * const redis = new Redis(process.env.REDIS_URL!, { ...REDIS_FAIL_FAST_OPTIONS, tls: {} });
 * const store = new RedisIdempotencyStore(redis);
 * @publicApi
 */
export const REDIS_FAIL_FAST_OPTIONS: Readonly<RedisOptions> = Object.freeze({
  connectTimeout: 2_000,
  commandTimeout: 2_000,
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false,
  retryStrategy: (attempt: number) => Math.min(attempt * 100, 1_000),
});

/** How long shutdown waits for a connection to end. */
const CLOSE_TIMEOUT_MS = 2_000;

/** The store's main connection, as {@link openConnection} sets it up. @internal */
export interface StoreConnection {
  readonly client: Redis | Cluster;
  /** True when the store created the client from a URL: it closes it on shutdown. */
  readonly ownsClient: boolean;
  /** Called before each command: coalesces socket writes on a client the store owns (not on a Cluster). */
  readonly beforeCommand: () => void;
}

/** @internal */
export function openConnection(client: Redis | Cluster | string): StoreConnection {
  if (typeof client === 'string') {
    const own = new Redis(client, { ...REDIS_FAIL_FAST_OPTIONS, lazyConnect: true });
    // Failures reach callers as rejected commands; without a listener ioredis would log each one.
    own.on('error', ignore);
    return { client: own, ownsClient: true, beforeCommand: coalescingWritesOf(own) };
  }
  // A client you pass keeps its own write behaviour: its other commands are not held back.
  return { client, ownsClient: false, beforeCommand: ignore };
}

/** @internal */
export function ignore(): void {}

/** Statuses in which a connection has a socket whose end is worth waiting for. */
const LIVE_STATUSES = new Set(['connecting', 'connect', 'ready']);

/**
 * Closes a connection and waits until it has ended: gracefully (QUIT, after the replies still
 * due) when `graceful` and it is ready, at once otherwise. A connection that is down (between
 * reconnect attempts) has no socket to wait for; a live one is waited for at most
 * CLOSE_TIMEOUT_MS.
 * @internal
 */
export async function closeConnection(client: Redis | Cluster, graceful: boolean): Promise<void> {
  if (client.status === 'end') return;
  if (!LIVE_STATUSES.has(client.status)) {
    client.disconnect();
    return;
  }
  let onEnd = ignore;
  const ended = new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
    timer.unref();
    onEnd = () => {
      clearTimeout(timer);
      resolve();
    };
    client.once('end', onEnd);
  });
  if (graceful && client.status === 'ready') {
    await client.quit().catch(() => client.disconnect());
  } else {
    client.disconnect();
  }
  await ended;
  client.off('end', onEnd);
}

/** Where the server is, for error messages (credentials redacted). @internal */
export function describeServer(client: Redis | Cluster | string): string {
  if (typeof client === 'string') {
    try {
      const url = new URL(client);
      if (url.password) url.password = '***';
      return url.toString();
    } catch {
      return 'the Redis URL given to the store (unparseable)';
    }
  }
  if (client.isCluster) return 'a Redis Cluster';
  const { host, port, path, sentinels, name } = (client as Redis).options;
  if (sentinels?.length) return `the Redis Sentinel master "${name}"`;
  return path ? `redis+unix://${path}` : `redis://${host}:${port}`;
}

/**
 * The actionable error for a command that failed at `where` (operation, key and server): an
 * unreadable record, a refusal by the server's ACL, or a server that is down or silent.
 * @internal
 */
export function commandFailure(where: string, prefix: string, error: unknown): IdempotencyStoreError {
  const message = error instanceof Error ? error.message : String(error);
  if (message.startsWith('IDEMPOTENCY_UNREADABLE')) {
    return new IdempotencyStoreError(
      `Redis idempotency store: ${where} found an unreadable record (${message}). Something else writes under ` +
        `the prefix "${prefix}", or an incompatible version of this library wrote it: give this store a ` +
        'prefix of its own, or delete the key.',
      'fast',
      { cause: error },
    );
  }
  if (message.startsWith('NOPERM')) {
    return new IdempotencyStoreError(
      `Redis idempotency store: ${where} was refused by the server's ACL (${message}). Grant the user ` +
        `+@scripting +publish +subscribe +unsubscribe, keys ~${prefix}:* and channels &${prefix}:done:*.`,
      'fast',
      { cause: error },
    );
  }
  if (message.includes('ERR syntax error')) {
    return new IdempotencyStoreError(
      `Redis idempotency store: ${where} failed (${message}). The store needs Redis 7.0 or later; an older ` +
        'server rejects its SET options (NX with GET).',
      'fast',
      { cause: error },
    );
  }
  return new IdempotencyStoreError(
    `Redis idempotency store: ${where} failed (${message}). Check that Redis runs and is reachable from this ` +
      'process; a client you pass in should use REDIS_FAIL_FAST_OPTIONS.',
    'fast',
    { cause: error },
  );
}
