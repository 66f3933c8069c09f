/**
 * `RedisIdempotencyStore`: the fast-tier contract on Redis, one Lua script per operation. Its
 * connection, waiters and reply codec live beside it (redis-connection.ts, redis-change-waiters.ts,
 * redis-reply-codec.ts).
 */
import type { OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import type { Cluster, Redis } from 'ioredis';
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
  checkDuration,
  checkForceDeleteScope,
  checkListArguments,
  checkRecord,
  checkResponse,
} from '../stores/store-arguments.js';
import { ChangeWaiters } from './redis-change-waiters.js';
import {
  checkEvictionPolicy,
  checkEvictionPolicyOption,
  type RedisEvictionPolicyCheck,
} from './redis-eviction-policy.js';
import { closeConnection, commandFailure, describeServer, openConnection } from './redis-connection.js';
import {
  checkRecordFormat,
  checkRequest,
  checkTextBytes,
  COMPLETED,
  decodeClaimReply,
  decodeFlagReply,
  decodeGetReply,
  decodeInProgressReply,
  encodeResponse,
  type RecordFormat,
} from './redis-reply-codec.js';
import { SCRIPT_COMMANDS, type ScriptCommands } from './redis-scripts.js';

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
  /**
   * When Redis may evict the store's keys (`maxmemory-policy` other than `noeviction`, checked
   * at startup on every node): `refuse` to start, `warn` and start, or `off` (no check). A
   * server whose `CONFIG` is denied or renamed gets a warning, never a refusal.
   * @default 'refuse'
   */
  evictionPolicy?: RedisEvictionPolicyCheck;
  /**
   * The record form the store writes; it reads both. `'compact'`: responses of at most 512 bytes
   * (headers and body) stored uncompressed with compact headers (record flag 16), larger ones
   * compressed. `'compatible'`: only the form 0.1.0 and earlier versions read (flags up to 15: JSON
   * headers, compressed whenever that is smaller), at the cost of a zlib stream per completion.
   * A rolling upgrade from such a version takes two deployments: this one with `'compatible'`,
   * then, once no old instance is left, `'compact'` (an old instance refuses a compact record
   * as unreadable, a store error: 503, or on a `'fail-open'` route a handler run again).
   * @default 'compact'
   * @example
   * new RedisIdempotencyStore(process.env.REDIS_URL!, { recordFormat: 'compatible' })
   */
  recordFormat?: 'compact' | 'compatible';
}

/** Read once at startup to prove that the server answers and runs the store's scripts. */
const STARTUP_PROBE_ID = 'startup-probe';

/** Keys SCAN is asked to visit per call (a hint to the server, not a limit). */
const SCAN_COUNT = 500;

/**
 * The fast tier on Redis (standalone, Sentinel or Cluster; Redis 7.0 or later, tested on 7.0): each operation
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
  /** Called before each command: coalesces socket writes on a client the store owns (not on a Cluster). */
  private readonly beforeCommand: () => void;
  private readonly waiters: ChangeWaiters;
  private readonly evictionPolicy: RedisEvictionPolicyCheck;
  private readonly recordFormat: RecordFormat;
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
    this.evictionPolicy = checkEvictionPolicyOption(options.evictionPolicy ?? 'refuse');
    this.recordFormat = checkRecordFormat(options.recordFormat ?? 'compact');
    this.server = describeServer(client);
    const connection = openConnection(client);
    this.client = connection.client;
    this.ownsClient = connection.ownsClient;
    this.beforeCommand = connection.beforeCommand;
    this.waiters = new ChangeWaiters(this.client);
    for (const [name, lua] of Object.entries(SCRIPT_COMMANDS)) {
      this.client.defineCommand(name, { lua, numberOfKeys: 1 });
    }
  }

  /**
   * Reads a probe record: connects a client the store owns and checks that the server runs the
   * store's scripts. Resolves when the server cannot be reached (the store fails closed per
   * request meanwhile); rejects with `IdempotencyStoreError` when it answers with an error.
   */
  async onModuleInit(): Promise<void> {
    let versions: unknown[];
    try {
      await this.get(STARTUP_PROBE_ID);
      versions = await this.serverVersions();
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      if (!(cause instanceof Error && cause.name === 'ReplyError')) return;
      throw new IdempotencyStoreError(`Redis idempotency store cannot start. ${(error as Error).message}`, 'fast', {
        cause: error,
      });
    }
    const old = versions.find((version) => typeof version !== 'string' || !atLeastRedis7(version));
    if (old !== undefined) {
      throw new IdempotencyStoreError(
        `Redis idempotency store cannot start: ${this.server} runs Redis ${typeof old === 'string' ? old : 'older than 7.0'}, ` +
          `and the store needs Redis ${MIN_REDIS_VERSION} or later (its claim script runs SET ... NX PXAT ... GET). ` +
          'Upgrade the server.',
        'fast',
      );
    }
    await checkEvictionPolicy(this.nodes(), this.server, this.evictionPolicy);
  }

  /** Wakes every waiter, closes the subscriber, and closes the main client if the store created it. */
  async onApplicationShutdown(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([this.waiters.close(), this.ownsClient && closeConnection(this.client, true)]);
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
    const stored = encodeResponse(response, this.recordFormat);
    const reply = await this.send('complete', key, (run, k) =>
      run.idempotencyComplete(
        k,
        ownerToken,
        response.statusCode,
        stored.headers,
        stored.flags,
        stored.body,
        this.channelOf(key),
      ),
    );
    return decodeFlagReply(reply, this.context('complete', key));
  }

  async release(key: string, ownerToken: string): Promise<boolean> {
    const reply = await this.send('release', key, (run, k) =>
      run.idempotencyRelease(k, ownerToken, this.channelOf(key)),
    );
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
    const stored = response ? encodeResponse(response, this.recordFormat) : undefined;
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
    const reply = await this.send('forceDelete', key, (run, k) =>
      run.idempotencyForceDelete(k, scope, this.channelOf(key)),
    );
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
    return this.waiters.wait(this.channelOf(key), timeoutMs, () => this.get(key));
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
    const entry = decodeInProgressReply(reply, this.context('listInProgress', id));
    return entry && { key: id, ...entry };
  }

  /**
   * The version of every server the scripts run on (every master of a Cluster), as its scripts
   * see it: `redis.REDIS_VERSION` (nil before Redis 7.0). A script needs no permission beyond
   * the store's own (`INFO` may be denied by the ACL).
   */
  private async serverVersions(): Promise<unknown[]> {
    try {
      return await Promise.all(this.nodes().map((node) => node.eval(VERSION_SCRIPT, 0)));
    } catch (error) {
      throw this.failure('onModuleInit (server version)', STARTUP_PROBE_ID, error);
    }
  }

  /** The server, or every master of a Cluster. */
  private nodes(): Redis[] {
    return this.client.isCluster ? (this.client as Cluster).nodes('master') : [this.client as Redis];
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
    return commandFailure(`${operation} of ${this.keyOf(id)} on ${this.server}`, this.prefix, error);
  }
}

/** The oldest Redis the scripts run on: `SET ... NX ... GET` (claim) came with 7.0. */
const MIN_REDIS_VERSION = '7.0';
/** A script's view of the server version; `redis.REDIS_VERSION` is nil before 7.0. */
const VERSION_SCRIPT = 'return redis.REDIS_VERSION';

function atLeastRedis7(version: string): boolean {
  return Number.parseInt(version, 10) >= 7;
}

/** Escapes the glob characters of SCAN MATCH. */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}
