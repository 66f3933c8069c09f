import type { OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { Redis, type Cluster, type RedisOptions } from 'ioredis';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  IdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
  type ForceDeleteScope,
  type InProgressEntry,
} from '../stores/idempotency-store.js';
import {
  checkClaimRequest,
  checkDuration,
  checkForceDeleteScope,
  checkListArguments,
  checkRecord,
  checkResponse,
} from '../stores/memory-idempotency.store.js';
import {
  CLAIM_SCRIPT,
  COMPLETE_SCRIPT,
  EXTEND_SCRIPT,
  FORCE_DELETE_SCRIPT,
  GET_SCRIPT,
  IN_PROGRESS_SCRIPT,
  RELEASE_SCRIPT,
  RESTORE_SCRIPT,
  TAKE_OVER_SCRIPT,
} from './redis-scripts.js';
import { coalescingWritesOf } from './write-coalescing.js';
import { packResponse, unpackResponse } from './response-packing.js';

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

/**
 * Options of {@link RedisIdempotencyStore}.
 *
 * @publicApi
 */
export interface RedisIdempotencyStoreOptions {
  /**
   * Namespace of the store's keys and channels: a record lives at `<prefix>:{<id>}` (the hash
   * tag keeps it in one Cluster slot), its notifications go to `<prefix>:done:{<id>}`. Give
   * each application its own prefix; it must not contain `{` or `}`.
   * @default 'idem'
   */
  prefix?: string;
}

/** Read once at startup to prove that the server answers and runs the store's scripts. */
const STARTUP_PROBE_ID = 'startup-probe';
const MAX_TEXT_BYTES = 0xffff;
/** How long shutdown waits for a connection to end. */
const CLOSE_TIMEOUT_MS = 2_000;

const COMPLETED = 1;
const BODY_OMITTED = 2;
const HAS_BODY = 4;
/** Headers and body are stored compressed in the body field (see response-packing.ts). */
const PACKED = 8;
const MAX_FLAGS = COMPLETED | BODY_OMITTED | HAS_BODY | PACKED;

/** Record fields in a script reply (see redis-scripts.ts). */
const RECORD_FIELDS = 10;

const SCRIPTS = {
  idempotencyClaim: CLAIM_SCRIPT,
  idempotencyTakeOver: TAKE_OVER_SCRIPT,
  idempotencyComplete: COMPLETE_SCRIPT,
  idempotencyRelease: RELEASE_SCRIPT,
  idempotencyExtend: EXTEND_SCRIPT,
  idempotencyGet: GET_SCRIPT,
  idempotencyRestore: RESTORE_SCRIPT,
  idempotencyInProgress: IN_PROGRESS_SCRIPT,
  idempotencyForceDelete: FORCE_DELETE_SCRIPT,
} as const;

/** Keys SCAN is asked to visit per call (a hint to the server, not a limit). */
const SCAN_COUNT = 500;

type Arg = string | Buffer | number;
type Send = (key: string, ...args: Arg[]) => Promise<unknown>;
/** The commands `defineCommand` adds; the `Buffer` variants answer bulk strings as Buffers. */
type ScriptCommands = { [Name in keyof typeof SCRIPTS]: Send } & {
  [Name in keyof typeof SCRIPTS as `${Name}Buffer`]: Send;
};

interface Channel {
  readonly waiters: Set<() => void>;
  /** Settles true once subscribed, false when the subscription failed. */
  readonly subscribed: Promise<boolean>;
}

/**
 * The fast tier on Redis (standalone, Sentinel or Cluster; Redis 5 or later, tested on 7.0): each operation
 * is one Lua script (see `redis-scripts.ts`), so one round trip, atomic on the server, clocked by
 * Redis `TIME`, on one key per record.
 *
 * - **Scripts** are registered with ioredis `defineCommand`: a connection sends each script's
 *   text once, then `EVALSHA`; after a `SCRIPT FLUSH` or a failover, `NOSCRIPT` makes ioredis
 *   send it again.
 * - **Replies** are checked for arity and types; anything unexpected, an unreadable record, and
 *   every connection error reject with `IdempotencyStoreError` (the engine fails closed).
 * - **Coalesced writes, no auto-pipelining**: on a client created from a URL, the commands sent
 *   during one event-loop iteration leave in one socket write (see `write-coalescing.ts`).
 *   ioredis `enableAutoPipelining` stays off: it batches one tick's commands only, which at the
 *   few commands per tick of an HTTP server costs more client CPU than it saves (measured: a
 *   claim and a completion took 80–160 µs of CPU with it, 60–90 µs without).
 * - **Fail fast**: a client created from a URL uses {@link REDIS_FAIL_FAST_OPTIONS}; a client you
 *   pass keeps your options, so give it the same ones, or at least `commandTimeout` and a small
 *   `maxRetriesPerRequest` (with ioredis defaults a request waits about 20 reconnect attempts).
 * - **Waiters** (`waitForChange`) share one subscriber connection, created on first use with
 *   `duplicate()`; each record has its own channel, unsubscribed when its last waiter leaves.
 * - **Lifecycle**: `onModuleInit` runs one read (connecting a client the store owns and loading
 *   that script). A server that is down or silent does not stop the application from starting:
 *   requests then fail closed (`503`, or the route's `onStoreError`) until it is back, and the
 *   health check says so. A server that answers with an error (an ACL that forbids scripts or
 *   keys, a wrong password, an unreadable record) is a misconfiguration that waiting will not
 *   fix: startup fails with an actionable `IdempotencyStoreError`. `onApplicationShutdown` wakes
 *   the waiters, closes the subscriber and closes the main client only when the store created it.
 *
 * ACL: the user needs `+@scripting +publish +subscribe +unsubscribe`, the keys `~<prefix>:*` and
 * the channels `&<prefix>:done:*`.
 *
 * @example
 * IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(process.env.REDIS_URL!, { prefix: 'orders-idem' }) })
 * @example
 * // Sharing the application's client: the store leaves it open on shutdown.
 * const redis = new Redis(process.env.REDIS_URL!, REDIS_FAIL_FAST_OPTIONS);
 * IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(redis) })
 * @publicApi
 */
export class RedisIdempotencyStore extends IdempotencyStore implements OnModuleInit, OnApplicationShutdown {
  /** The connection the scripts run on (for health checks). Closed on shutdown only if the store created it. */
  readonly client: Redis | Cluster;
  private readonly ownsClient: boolean;
  private readonly prefix: string;
  /** Where the server is, for error messages (credentials redacted). */
  private readonly server: string;
  private readonly channels = new Map<string, Channel>();
  /** Called before each command: coalesces socket writes on a client the store owns (not on a Cluster). */
  private readonly beforeCommand: () => void;
  private subscriber?: Redis | Cluster;
  private closed = false;

  /**
   * @param client a `redis://` or `rediss://` URL (the store creates, owns and closes the client)
   *   or an ioredis `Redis` / `Cluster` you own (the store never closes it).
   */
  constructor(client: Redis | Cluster | string, options: RedisIdempotencyStoreOptions = {}) {
    super();
    const prefix = options.prefix ?? 'idem';
    if (typeof prefix !== 'string' || prefix.length === 0 || /[{}]/.test(prefix)) {
      throw new TypeError(`prefix must be a non-empty string without "{" or "}", got ${JSON.stringify(prefix)}`);
    }
    this.prefix = prefix;
    this.ownsClient = typeof client === 'string';
    this.server = describeServer(client);
    if (typeof client === 'string') {
      const own = new Redis(client, { ...REDIS_FAIL_FAST_OPTIONS, lazyConnect: true });
      // Failures reach callers as rejected commands; without a listener ioredis would log each one.
      own.on('error', ignore);
      this.client = own;
      this.beforeCommand = coalescingWritesOf(own);
    } else {
      // A client you pass keeps its own write behaviour: its other commands are not held back.
      this.client = client;
      this.beforeCommand = ignore;
    }
    for (const [name, lua] of Object.entries(SCRIPTS)) {
      this.client.defineCommand(name, { lua, numberOfKeys: 1 });
    }
  }

  /**
   * Reads a probe record: connects a client the store owns and checks that the server runs the
   * store's scripts. Resolves when the server cannot be reached (the store fails closed per
   * request meanwhile); rejects with `IdempotencyStoreError` when it answers with an error.
   */
  async onModuleInit(): Promise<void> {
    try {
      await this.get(STARTUP_PROBE_ID);
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      if (!(cause instanceof Error && cause.name === 'ReplyError')) return;
      throw new IdempotencyStoreError(`Redis idempotency store cannot start. ${(error as Error).message}`, 'fast', {
        cause: error,
      });
    }
  }

  /** Wakes every waiter, closes the subscriber, and closes the main client if the store created it. */
  async onApplicationShutdown(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const channel of [...this.channels.values()]) {
      for (const wake of [...channel.waiters]) wake();
    }
    this.channels.clear();
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    await Promise.all([
      subscriber && closeConnection(subscriber, false),
      this.ownsClient && closeConnection(this.client, true),
    ]);
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    checkRequest(request);
    const reply = await this.send('claim', key, (run, k) =>
      run.idempotencyClaimBuffer(k, request.ownerToken, request.fingerprint, request.leaseMs, request.ttlMs),
    );
    return decodeClaimReply(reply, this.context('claim', key));
  }

  async takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest): Promise<ClaimResult> {
    checkRequest(request);
    const reply = await this.send('takeOver', key, (run, k) =>
      run.idempotencyTakeOverBuffer(
        k,
        expectedOwnerToken,
        request.ownerToken,
        request.fingerprint,
        request.leaseMs,
        request.ttlMs,
        this.channelOf(key),
      ),
    );
    return decodeClaimReply(reply, this.context('takeOver', key));
  }

  async complete(key: string, ownerToken: string, response: StoredResponse): Promise<boolean> {
    checkResponse(response);
    const stored = encodeResponse(response);
    const reply = await this.send('complete', key, (run, k) =>
      run.idempotencyComplete(k, ownerToken, response.statusCode, stored.headers, stored.flags, stored.body, this.channelOf(key)),
    );
    return decodeFlagReply(reply, this.context('complete', key));
  }

  async release(key: string, ownerToken: string): Promise<boolean> {
    const reply = await this.send('release', key, (run, k) => run.idempotencyRelease(k, ownerToken, this.channelOf(key)));
    return decodeFlagReply(reply, this.context('release', key));
  }

  async extend(key: string, ownerToken: string, leaseMs: number): Promise<boolean> {
    checkDuration('leaseMs', leaseMs);
    const reply = await this.send('extend', key, (run, k) => run.idempotencyExtend(k, ownerToken, leaseMs));
    return decodeFlagReply(reply, this.context('extend', key));
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    const reply = await this.send('get', key, (run, k) => run.idempotencyGetBuffer(k));
    return decodeGetReply(reply, this.context('get', key));
  }

  /** Also returns false, writing nothing, when `record` is already expired (by the Redis clock). */
  async restore(key: string, record: IdempotencyRecord): Promise<boolean> {
    checkRecord(record);
    checkTextBytes('ownerToken', record.ownerToken);
    checkTextBytes('fingerprint', record.fingerprint);
    const response = record.response;
    const stored = response ? encodeResponse(response) : undefined;
    const reply = await this.send('restore', key, (run, k) =>
      run.idempotencyRestore(
        k,
        stored ? COMPLETED | stored.flags : 0,
        record.fencingToken,
        record.createdAtMs,
        record.leaseExpiresAtMs,
        record.expiresAtMs,
        response?.statusCode ?? 0,
        record.fingerprint,
        record.ownerToken,
        stored?.headers ?? '',
        stored?.body ?? '',
      ),
    );
    return decodeFlagReply(reply, this.context('restore', key));
  }

  /**
   * SCANs the keys under the prefix (every master of a Cluster), asking each one's record with
   * one small script that answers only in-progress records, and keeps the `limit` oldest. A value
   * it cannot read is skipped (`get` of it says why). Its cost grows with the number of records
   * under the prefix: an inspection tool, not a hot path.
   */
  override async listInProgress(olderThanMs: number, limit: number): Promise<InProgressEntry[]> {
    checkListArguments(olderThanMs, limit);
    const found: InProgressEntry[] = [];
    const nodes = this.client.isCluster ? (this.client as Cluster).nodes('master') : [this.client as Redis];
    for (const node of nodes) {
      let cursor = '0';
      do {
        let keys: string[];
        try {
          [cursor, keys] = await node.scan(cursor, 'MATCH', `${escapeGlob(this.prefix)}:{*}`, 'COUNT', SCAN_COUNT);
        } catch (error) {
          throw this.failure('listInProgress (SCAN)', '*', error);
        }
        const entries = await Promise.all(keys.map((key) => this.inProgressEntry(key, olderThanMs)));
        for (const entry of entries) if (entry) found.push(entry);
        found.sort((a, b) => a.record.createdAtMs - b.record.createdAtMs).splice(limit);
      } while (cursor !== '0');
    }
    return found;
  }

  override async forceDelete(key: string, scope: ForceDeleteScope = 'in-progress'): Promise<boolean> {
    checkForceDeleteScope(scope);
    const reply = await this.send('forceDelete', key, (run, k) => run.idempotencyForceDelete(k, scope, this.channelOf(key)));
    return decodeFlagReply(reply, this.context('forceDelete', key));
  }

  /**
   * Resolves on the next `complete`, `release` or `takeOver` of `key` in any process (Redis
   * pub/sub), or after `timeoutMs`. Once subscribed, it reads the record once and resolves at
   * once when it is no longer in progress, so a change between the caller's read and the
   * subscription is never missed. Never rejects: when the subscription fails it waits for the
   * timeout, and a failing read resolves it at once (the caller's next read reports the error).
   */
  override waitForChange(key: string, timeoutMs: number): Promise<void> {
    if (this.closed || !(timeoutMs > 0)) return Promise.resolve();
    const name = this.channelOf(key);
    return new Promise<void>((resolve) => {
      let settled = false;
      const wake = (): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.leave(name, wake);
        resolve();
      };
      const timer = setTimeout(wake, timeoutMs);
      timer.unref();
      let channel: Channel;
      try {
        channel = this.join(name, wake);
      } catch {
        return; // no subscriber connection: the timeout resolves the wait
      }
      void channel.subscribed.then(async (subscribed) => {
        if (!subscribed || settled) return;
        const record = await this.get(key).catch(() => undefined);
        if (record?.state !== 'in_progress') wake();
      });
    });
  }

  /** The entry of one scanned key; undefined when it is not a listable record (an unreadable value is skipped). */
  private async inProgressEntry(redisKey: string, olderThanMs: number): Promise<InProgressEntry | undefined> {
    const id = redisKey.slice(this.prefix.length + 2, -1);
    let reply: unknown;
    try {
      reply = await this.send('listInProgress', id, (run, k) => run.idempotencyInProgressBuffer(k, olderThanMs));
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      if (cause instanceof Error && cause.message.startsWith('IDEMPOTENCY_UNREADABLE')) return undefined;
      throw error;
    }
    if (reply === null) return undefined;
    const context = this.context('listInProgress', id);
    const values = expectArray(reply, 1 + RECORD_FIELDS, context);
    const nowMs = expectInteger(values[0], 'the server time', context);
    return { key: id, record: decodeRecord(values, 1, context), nowMs };
  }

  private keyOf(id: string): string {
    return `${this.prefix}:{${id}}`;
  }

  private channelOf(id: string): string {
    return `${this.prefix}:done:{${id}}`;
  }

  private context(operation: string, id: string): string {
    return `${operation} of ${this.keyOf(id)}`;
  }

  private async send(
    operation: string,
    id: string,
    call: (commands: ScriptCommands, key: string) => Promise<unknown>,
  ): Promise<unknown> {
    try {
      this.beforeCommand();
      return await call(this.client as unknown as ScriptCommands, this.keyOf(id));
    } catch (error) {
      throw this.failure(operation, id, error);
    }
  }

  private failure(operation: string, id: string, error: unknown): IdempotencyStoreError {
    const message = error instanceof Error ? error.message : String(error);
    const where = `${operation} of ${this.keyOf(id)} on ${this.server}`;
    if (message.startsWith('IDEMPOTENCY_UNREADABLE')) {
      return new IdempotencyStoreError(
        `Redis idempotency store: ${where} found an unreadable record (${message}). Something else writes under ` +
          `the prefix "${this.prefix}", or an incompatible version of this library wrote it: give this store a ` +
          'prefix of its own, or delete the key.',
        'fast',
        { cause: error },
      );
    }
    if (message.startsWith('NOPERM')) {
      return new IdempotencyStoreError(
        `Redis idempotency store: ${where} was refused by the server's ACL (${message}). Grant the user ` +
          `+@scripting +publish +subscribe +unsubscribe, keys ~${this.prefix}:* and channels &${this.prefix}:done:*.`,
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

  private join(name: string, wake: () => void): Channel {
    let channel = this.channels.get(name);
    if (!channel) {
      channel = {
        waiters: new Set(),
        subscribed: this.subscriberConnection()
          .subscribe(name)
          .then(
            () => true,
            () => false,
          ),
      };
      this.channels.set(name, channel);
    }
    channel.waiters.add(wake);
    return channel;
  }

  private leave(name: string, wake: () => void): void {
    const channel = this.channels.get(name);
    if (!channel?.waiters.delete(wake) || channel.waiters.size > 0) return;
    this.channels.delete(name);
    if (!this.closed) this.subscriber?.unsubscribe(name).catch(ignore);
  }

  private subscriberConnection(): Redis | Cluster {
    if (!this.subscriber) {
      const subscriber = this.client.isCluster
        ? // A subscription asked for before the cluster is ready waits for it (each waiter has its own timeout).
          (this.client as Cluster).duplicate([], { enableOfflineQueue: true })
        : (this.client as Redis).duplicate({
            lazyConnect: false,
            enableOfflineQueue: true,
            autoResubscribe: true,
            maxRetriesPerRequest: 0,
            commandTimeout: (this.client as Redis).options.commandTimeout ?? REDIS_FAIL_FAST_OPTIONS.commandTimeout,
          });
      subscriber.on('error', ignore);
      subscriber.on('message', (channel: string) => {
        const waiters = this.channels.get(channel)?.waiters;
        if (waiters) for (const wake of [...waiters]) wake();
      });
      this.subscriber = subscriber;
    }
    return this.subscriber;
  }
}

function ignore(): void {}

/** Escapes the glob characters of SCAN MATCH. */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** Statuses in which a connection has a socket whose end is worth waiting for. */
const LIVE_STATUSES = new Set(['connecting', 'connect', 'ready']);

/**
 * Closes a connection and waits until it has ended: gracefully (QUIT, after the replies still
 * due) when `graceful` and it is ready, at once otherwise. A connection that is down (between
 * reconnect attempts) has no socket to wait for; a live one is waited for at most
 * CLOSE_TIMEOUT_MS.
 */
async function closeConnection(client: Redis | Cluster, graceful: boolean): Promise<void> {
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

function describeServer(client: Redis | Cluster | string): string {
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

function checkTextBytes(name: string, value: string): void {
  if (Buffer.byteLength(value, 'utf8') > MAX_TEXT_BYTES) {
    throw new RangeError(`${name} must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`);
  }
}

/** A response as the scripts store it: flags, headers JSON and body, compressed together when that is smaller. */
function encodeResponse(response: StoredResponse): { flags: number; headers: string; body: Buffer | string } {
  const flags = (response.bodyOmitted === true ? BODY_OMITTED : 0) | (response.body !== undefined ? HAS_BODY : 0);
  const headers = JSON.stringify(response.headers);
  const packed = packResponse(headers, response.body);
  if (packed) return { flags: flags | PACKED, headers: '', body: packed };
  return { flags, headers, body: response.body ?? '' };
}

function checkRequest(request: ClaimRequest): void {
  checkClaimRequest(request);
  checkTextBytes('ownerToken', request.ownerToken);
  checkTextBytes('fingerprint', request.fingerprint);
}

/* ------------------------------------------------------------------------------------------------
 * Reply decoders. Exported for the store's tests only (not part of the entry point): each checks
 * arity and types and throws IdempotencyStoreError on anything else. Messages describe a reply by
 * its shape, never by its content (it may hold a stored response).
 * --------------------------------------------------------------------------------------------- */

/** @internal */
export function decodeClaimReply(reply: unknown, context: string): ClaimResult {
  const values = expectArray(reply, 2 + RECORD_FIELDS, context);
  const kind = expectInteger(values[0], 'the claim kind', context);
  const nowMs = expectInteger(values[1], 'the server time', context);
  const record = decodeRecord(values, 2, context);
  if (kind === 1) return { kind: 'claimed', record };
  if (kind === 0) return { kind: 'existing', record, nowMs };
  throw unexpected(context, `claim kind ${kind} (expected 0 or 1)`);
}

/** @internal */
export function decodeGetReply(reply: unknown, context: string): IdempotencyRecord | undefined {
  if (reply === null) return undefined;
  return decodeRecord(expectArray(reply, RECORD_FIELDS, context), 0, context);
}

/** @internal */
export function decodeFlagReply(reply: unknown, context: string): boolean {
  if (reply === 1) return true;
  if (reply === 0) return false;
  throw unexpected(context, `${describe(reply)} (expected the integer 0 or 1)`);
}

function decodeRecord(values: readonly unknown[], at: number, context: string): IdempotencyRecord {
  const flags = expectInteger(values[at], 'the record flags', context);
  const fencingToken = expectInteger(values[at + 1], 'the fencing token', context);
  const createdAtMs = expectInteger(values[at + 2], 'createdAtMs', context);
  const leaseExpiresAtMs = expectInteger(values[at + 3], 'leaseExpiresAtMs', context);
  const expiresAtMs = expectInteger(values[at + 4], 'expiresAtMs', context);
  const statusCode = expectInteger(values[at + 5], 'the status code', context);
  const fingerprint = expectBytes(values[at + 6], 'the fingerprint', context).toString('utf8');
  const ownerToken = expectBytes(values[at + 7], 'the owner token', context).toString('utf8');
  let headers = expectBytes(values[at + 8], 'the headers', context);
  let body = expectBytes(values[at + 9], 'the body', context);
  if (flags < 0 || flags > MAX_FLAGS || (flags !== 0 && (flags & COMPLETED) === 0)) {
    throw unexpected(context, `record flags ${flags}`);
  }
  if (fencingToken < 1) throw unexpected(context, `fencing token ${fencingToken}`);
  const fields = { fingerprint, ownerToken, fencingToken, createdAtMs, leaseExpiresAtMs, expiresAtMs };
  if (flags === 0) {
    if (statusCode !== 0 || headers.length > 0 || body.length > 0) {
      throw unexpected(context, 'an in-progress record that carries a response');
    }
    return { state: 'in_progress', ...fields };
  }
  if ((flags & PACKED) !== 0) {
    if (headers.length > 0) throw unexpected(context, 'headers beside a packed response');
    try {
      ({ headers, body } = unpackResponse(body));
    } catch {
      throw unexpected(context, 'a packed response that does not unpack');
    }
  }
  if ((flags & HAS_BODY) === 0 && body.length > 0) throw unexpected(context, 'body bytes on a record without a body');
  if (statusCode < 100 || statusCode > 999) throw unexpected(context, `status code ${statusCode}`);
  return {
    state: 'completed',
    ...fields,
    response: {
      statusCode,
      headers: parseHeaders(headers, context),
      // A copy: the reply's Buffer may be a view into a larger socket chunk.
      ...((flags & HAS_BODY) !== 0 && { body: Buffer.from(body) }),
      ...((flags & BODY_OMITTED) !== 0 && { bodyOmitted: true }),
    },
  };
}

function parseHeaders(raw: Buffer, context: string): Record<string, string | string[]> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw unexpected(context, 'stored headers that are not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw unexpected(context, 'stored headers that are not a JSON object');
  }
  for (const value of Object.values(parsed)) {
    const valid = typeof value === 'string' || (Array.isArray(value) && value.every((v) => typeof v === 'string'));
    if (!valid) throw unexpected(context, 'a stored header value that is neither a string nor an array of strings');
  }
  return parsed as Record<string, string | string[]>;
}

function expectArray(reply: unknown, length: number, context: string): readonly unknown[] {
  if (!Array.isArray(reply) || reply.length !== length) {
    throw unexpected(context, `${describe(reply)} (expected an array of ${length})`);
  }
  return reply;
}

function expectInteger(value: unknown, what: string, context: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw unexpected(context, `${describe(value)} as ${what} (expected an integer)`);
  }
  return value;
}

function expectBytes(value: unknown, what: string, context: string): Buffer {
  if (!Buffer.isBuffer(value)) throw unexpected(context, `${describe(value)} as ${what} (expected a bulk string)`);
  return value;
}

function describe(value: unknown): string {
  if (value === null) return 'nil';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (Buffer.isBuffer(value)) return `a bulk string of ${value.length} bytes`;
  if (typeof value === 'number') return Number.isInteger(value) ? `the integer ${value}` : 'a non-integer number';
  return `a ${typeof value}`;
}

function unexpected(context: string, what: string): IdempotencyStoreError {
  return new IdempotencyStoreError(
    `Unexpected reply from Redis to ${context}: ${what}. The store reads only what its own scripts answer: make sure ` +
      'nothing between the store and Redis rewrites replies, and that one version of this library uses the prefix.',
  );
}
