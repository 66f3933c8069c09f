import { randomBytes } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { jest } from '@jest/globals';
import { Cluster, type Redis } from 'ioredis';
import { IdempotencyStoreError, MemoryIdempotencyStore, type StoredResponse } from 'nestjs-idempotency';
import {
  REDIS_FAIL_FAST_OPTIONS,
  RedisIdempotencyStore,
  type RedisIdempotencyStoreOptions,
} from 'nestjs-idempotency/redis';
import { decodeClaimReply, decodeFlagReply, decodeGetReply } from '../src/redis/redis-reply-codec.js';
import { packResponse } from '../src/redis/response-packing.js';
import { deleteKeys, openRedis, redisUrl } from '../../../test/support/servers/redis.js';
import { freePort } from '../../../test/support/net/free-port.js';
import { startRedisCluster, type ThrowawayRedisCluster } from '../../../test/support/servers/redis-cluster.js';
import { startRedisServer } from '../../../test/support/servers/redis-server.js';
import {
  claimRequest,
  describeStoreContract,
  newFingerprint,
  newId,
  newToken,
  sampleResponse,
} from 'nestjs-idempotency/testing';
import { sleep } from '../../../test/support/timing.js';

/** Every key this run writes starts with it; the shared Redis is never flushed. */
const RUN = `idem-stores-${randomBytes(4).toString('hex')}`;

const elapsedSince = (started: number): number => performance.now() - started;

/** Polls `read` until it returns `expected` (pub/sub state settles asynchronously). */
async function eventually<T>(read: () => Promise<T>, expected: T, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = await read();
  while (last !== expected && Date.now() < deadline) {
    await sleep(20);
    last = await read();
  }
  expect(last).toBe(expected);
}

describeStoreContract('MemoryIdempotencyStore', async () => {
  const store = new MemoryIdempotencyStore();
  return { store, cleanup: async () => store.onApplicationShutdown() };
});

describe('RedisIdempotencyStore', () => {
  let redis: Redis;
  let counter = 0;
  const nextPrefix = (label: string): string => `${RUN}-${label}${counter++}`;
  const numsub = async (channel: string): Promise<number> => {
    const reply = (await redis.call('PUBSUB', 'NUMSUB', channel)) as [string, number];
    return Number(reply[1]);
  };

  beforeAll(async () => {
    redis = await openRedis();
  });
  afterAll(async () => {
    if (!redis) return;
    await deleteKeys(redis, RUN);
    await redis.quit();
  });

  /** A store of its own prefix on the shared Redis, for the contract suite. */
  const contractStore = (label: string, options: RedisIdempotencyStoreOptions) => async () => {
    const prefix = nextPrefix(label);
    const store = new RedisIdempotencyStore(redis, { ...options, prefix });
    await store.onModuleInit();
    return {
      store,
      cleanup: async () => {
        await store.onApplicationShutdown();
        await deleteKeys(redis, `${prefix}:`);
      },
    };
  };

  describeStoreContract('RedisIdempotencyStore (127.0.0.1:6379 or REDIS_URL)', contractStore('contract', {}));
  describeStoreContract(
    "RedisIdempotencyStore, recordFormat 'compatible' (the first step of a rolling upgrade)",
    contractStore('contract-compatible', { recordFormat: 'compatible' }),
  );

  describe('storage layout', () => {
    let store: RedisIdempotencyStore;
    let prefix: string;
    beforeEach(() => {
      prefix = nextPrefix('layout');
      store = new RedisIdempotencyStore(redis, { prefix });
    });
    afterEach(() => store.onApplicationShutdown());

    it('keeps one string at <prefix>:{<id>} whose Redis expiry is expiresAtMs, through complete and extend', async () => {
      const id = newId();
      const key = `${prefix}:{${id}}`;
      const { record } = await store.claim(id, claimRequest({ ttlMs: 90_000 }));
      expect(await redis.type(key)).toBe('string');
      expect(await redis.call('PEXPIRETIME', key)).toBe(record.expiresAtMs);
      expect(await store.extend(id, record.ownerToken, 45_000)).toBe(true);
      expect(await redis.call('PEXPIRETIME', key)).toBe(record.expiresAtMs);
      expect(await store.complete(id, record.ownerToken, sampleResponse())).toBe(true);
      expect(await redis.call('PEXPIRETIME', key)).toBe(record.expiresAtMs);
      expect(await redis.keys(`${prefix}:*`)).toEqual([key]);
    });

    it('lets Redis delete an expired record by itself', async () => {
      const id = newId();
      await store.claim(id, claimRequest({ ttlMs: 30 }));
      await sleep(80);
      expect(await redis.exists(`${prefix}:{${id}}`)).toBe(0);
    });

    it('takes its clock from Redis TIME: nowMs lies between two TIME readings', async () => {
      const id = newId();
      await store.claim(id, claimRequest());
      const time = async (): Promise<number> => {
        const [seconds, micros] = await redis.time();
        return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      };
      const before = await time();
      const result = await store.claim(id, claimRequest());
      const after = await time();
      expect(result.kind).toBe('existing');
      if (result.kind !== 'existing') return;
      expect(result.nowMs).toBeGreaterThanOrEqual(before);
      expect(result.nowMs).toBeLessThanOrEqual(after);
    });

    it('keeps prefixes apart', async () => {
      const other = new RedisIdempotencyStore(redis, { prefix: nextPrefix('other') });
      const id = newId();
      await store.claim(id, claimRequest());
      expect((await other.claim(id, claimRequest())).kind).toBe('claimed');
      await other.onApplicationShutdown();
    });

    it('rejects a prefix that would break the hash tag', () => {
      expect(() => new RedisIdempotencyStore(redis, { prefix: 'a{b' })).toThrow(TypeError);
      expect(() => new RedisIdempotencyStore(redis, { prefix: '' })).toThrow(TypeError);
    });
  });

  describe('round trips', () => {
    it('costs exactly one top-level command per claim, complete and get once the scripts are loaded (MONITOR)', async () => {
      const client = await openRedis();
      const observer = await openRedis();
      const store = new RedisIdempotencyStore(client, { prefix: nextPrefix('rt') });
      const feed = await observer.monitor();
      try {
        // Warm-up: ioredis sends each script's text once per connection, then EVALSHA.
        const warm = newId();
        const warmClaim = await store.claim(warm, claimRequest());
        await store.complete(warm, warmClaim.record.ownerToken, sampleResponse());
        await store.get(warm);

        const info = String(await client.call('CLIENT', 'INFO'));
        const address = /addr=(\S+)/.exec(info)?.[1];
        expect(address).toBeDefined();
        const seen: { source: string; command: string }[] = [];
        feed.on('monitor', (_time: string, args: string[], source: string) => {
          if (source === address || source === 'lua') seen.push({ source, command: args[0].toLowerCase() });
        });
        const mark = (label: string): Promise<unknown> => client.call('ECHO', `${RUN}-${label}`);

        const id = newId();
        await mark('start');
        const claimed = await store.claim(id, claimRequest());
        await mark('claimed');
        expect(await store.complete(id, claimed.record.ownerToken, sampleResponse())).toBe(true);
        await mark('completed');
        expect((await store.get(id))?.state).toBe('completed');
        await mark('end');
        await eventually(async () => seen.filter((s) => s.command === 'echo').length, 4);

        const segments: { top: string[]; lua: string[] }[] = [];
        for (const entry of seen) {
          if (entry.command === 'echo') segments.push({ top: [], lua: [] });
          else if (segments.length > 0)
            segments[segments.length - 1][entry.source === 'lua' ? 'lua' : 'top'].push(entry.command);
        }
        const [claim, complete, get] = segments;
        expect(claim.top).toEqual(['evalsha']);
        expect(complete.top).toEqual(['evalsha']);
        expect(get.top).toEqual(['evalsha']);
        // The script internals are visible, and marked `lua`: the filter above is not vacuous.
        // Claim: SET ... NX PXAT ... GET claims and answers in one command; complete reads no clock.
        expect(claim.lua).toEqual(['time', 'set']);
        expect(complete.lua).toEqual(['get', 'set', 'publish']);
        expect(get.lua).toEqual(['time', 'get']);
        expect(segments[3]).toEqual({ top: [], lua: [] });
      } finally {
        feed.disconnect();
        await store.onApplicationShutdown();
        await observer.quit();
        await client.quit();
      }
    });
  });

  describe('claim in one command (SET ... NX PXAT ... GET)', () => {
    let store: RedisIdempotencyStore;
    let prefix: string;
    beforeEach(() => {
      prefix = nextPrefix('setnx');
      store = new RedisIdempotencyStore(redis, { prefix });
    });
    afterEach(() => store.onApplicationShutdown());

    it('claims afresh a record past its own expiresAtMs whose key lives on (its Redis expiry removed)', async () => {
      const id = newId();
      const key = `${prefix}:{${id}}`;
      const first = await store.claim(id, claimRequest({ ttlMs: 30 }));
      expect(await redis.persist(key)).toBe(1);
      await sleep(80);
      expect(await redis.exists(key)).toBe(1);
      expect(await store.get(id)).toBeUndefined();
      const second = await store.claim(id, claimRequest());
      expect(second.kind).toBe('claimed');
      expect(second.record.ownerToken).not.toBe(first.record.ownerToken);
      expect(second.record.fencingToken).toBe(1);
      // The overwrite puts the Redis expiry back.
      expect(await redis.call('PEXPIRETIME', key)).toBe(second.record.expiresAtMs);
      expect((await store.get(id))?.ownerToken).toBe(second.record.ownerToken);
    });

    it('answers a record that has not expired, unchanged, without rewriting its value or its expiry', async () => {
      const id = newId();
      const key = `${prefix}:{${id}}`;
      const { record } = await store.claim(id, claimRequest());
      expect(await store.complete(id, record.ownerToken, sampleResponse())).toBe(true);
      const before = await redis.dumpBuffer(key);
      const expiry = await redis.call('PEXPIRETIME', key);
      const again = await store.claim(id, claimRequest());
      expect(again.kind).toBe('existing');
      expect(again.record).toEqual(await store.get(id));
      expect(await redis.dumpBuffer(key)).toEqual(before);
      expect(await redis.call('PEXPIRETIME', key)).toBe(expiry);
    });

    it.each([
      ['a small response: compact headers (flag 16), not compressed', 300, 16],
      ['a response of more than 512 bytes: compressed (flag 8)', 2_000, 8],
    ])('stores %s, and reads it back exactly', async (_, bodyBytes, format) => {
      const id = newId();
      const key = `${prefix}:{${id}}`;
      const response: StoredResponse = {
        statusCode: 201,
        headers: { 'content-type': 'application/json; charset=utf-8', location: '/orders/7', vary: ['Origin'] },
        body: Buffer.from(JSON.stringify({ status: 'paid', note: 'n'.repeat(bodyBytes) }).slice(0, bodyBytes)),
      };
      const { record } = await store.claim(id, claimRequest());
      expect(await store.complete(id, record.ownerToken, response)).toBe(true);
      const flags = (await redis.getBuffer(key))![1]!;
      expect(flags & (8 | 16)).toBe(format);
      expect((await store.get(id))?.response).toEqual(response);
    });

    it('reads a completed record written by the previous release (SET, then PEXPIREAT; packed, flag 8)', async () => {
      // The bytes and expiry of a record as 0.1.0 of this store wrote them, built here
      // field by field (layout of redis-record-format.ts), not by the current scripts.
      const id = newId();
      const key = `${prefix}:{${id}}`;
      const [seconds] = await redis.time();
      const now = Number(seconds) * 1000;
      const headers = { 'content-type': 'application/json; charset=utf-8', location: '/orders/7' };
      const body = Buffer.from(
        JSON.stringify({ id: 7, status: 'paid', currency: 'EUR', items: [{ sku: 'A', quantity: 1 }] }).repeat(3),
      );
      const packed = packResponse(JSON.stringify(headers), body);
      expect(packed).toBeDefined();
      const fingerprint = newFingerprint();
      const owner = newToken();
      const head = Buffer.alloc(26);
      head.writeUInt8(1, 0); // format version
      head.writeUInt8(1 | 4 | 8, 1); // completed, has a body, packed
      head.writeUInt32BE(3, 2); // fencing token
      head.writeUIntBE(now - 5_000, 6, 6);
      head.writeUIntBE(now + 25_000, 12, 6);
      head.writeUIntBE(now + 60_000, 18, 6);
      head.writeUInt16BE(201, 24);
      const text = (value: string): Buffer => {
        const bytes = Buffer.from(value);
        const length = Buffer.alloc(2);
        length.writeUInt16BE(bytes.length);
        return Buffer.concat([length, bytes]);
      };
      await redis.set(key, Buffer.concat([head, text(fingerprint), text(owner), Buffer.alloc(4), packed!]));
      await redis.pexpireat(key, now + 60_000);
      const expected = {
        state: 'completed',
        fingerprint,
        ownerToken: owner,
        fencingToken: 3,
        createdAtMs: now - 5_000,
        leaseExpiresAtMs: now + 25_000,
        expiresAtMs: now + 60_000,
        response: { statusCode: 201, headers, body },
      };
      expect(await store.get(id)).toEqual(expected);
      const replay = await store.claim(id, claimRequest());
      expect(replay.kind).toBe('existing');
      expect(replay.record).toEqual(expected);
    });

    it('answers an error other than WRONGTYPE as it is (OOM), not as an unreadable record, and writes nothing', async () => {
      const server = await startRedisServer();
      const admin = await openRedis(server.url);
      const own = new RedisIdempotencyStore(server.url, { prefix: RUN });
      try {
        await own.onModuleInit();
        await admin.config('SET', 'maxmemory-policy', 'noeviction');
        await admin.config('SET', 'maxmemory', '1');
        const error = await own.claim(newId(), claimRequest()).then(
          () => new Error('claim resolved'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        expect((error as Error).message).toContain('OOM');
        expect((error as Error).message).not.toContain('unreadable');
        await admin.config('SET', 'maxmemory', '0');
        expect(await admin.dbsize()).toBe(0);
      } finally {
        await own.onApplicationShutdown();
        await admin.quit();
        await server.stop();
      }
    });
  });

  describe("rolling upgrade from 0.1.0: recordFormat 'compatible'", () => {
    /**
     * 0.1.0's record decoding (the `decode` of its scripts' prelude, with the checks it made),
     * kept here as that release shipped it: the test's stand-in for an instance not yet upgraded.
     * Answers the flags and headers field of a record it accepts, or why it refuses it.
     */
    const RELEASE_0_1_0_DECODE = `
local raw = redis.call('GET', KEYS[1])
local ok, version, flags, fencing, created, lease, expires, status, fp, owner, headers, pos =
  pcall(struct.unpack, '>BBI4I6I6I6I2I2c0I2c0I4c0', raw)
if not ok then return redis.error_reply('the value is not a record') end
if version ~= 1 then return redis.error_reply('unknown record format version') end
local body = string.sub(raw, pos)
if flags > 15 or (flags ~= 0 and flags % 2 == 0) or fencing < 1
    or (bit.band(flags, 4 + 8) == 0 and #body > 0)
    or (bit.band(flags, 8) ~= 0 and #headers > 0) then
  return redis.error_reply('inconsistent record fields')
end
return { flags, headers }
`;
    const decodeAs010 = async (key: string): Promise<[number, string]> =>
      (await redis.eval(RELEASE_0_1_0_DECODE, 1, key)) as [number, string];

    let prefix: string;
    let compatible: RedisIdempotencyStore;
    let compact: RedisIdempotencyStore;
    beforeEach(() => {
      prefix = nextPrefix('compat');
      compatible = new RedisIdempotencyStore(redis, { prefix, recordFormat: 'compatible' });
      compact = new RedisIdempotencyStore(redis, { prefix });
    });
    afterEach(async () => {
      await compatible.onApplicationShutdown();
      await compact.onApplicationShutdown();
    });

    const order = (bodyBytes: number): StoredResponse => ({
      statusCode: 201,
      headers: { 'content-type': 'application/json; charset=utf-8', location: '/orders/7', vary: ['Origin'] },
      body: Buffer.from(JSON.stringify({ status: 'paid', note: 'n'.repeat(bodyBytes) }).slice(0, bodyBytes)),
    });

    it.each([
      ['a 300-byte order (compact would store it with flag 16)', order(300), true],
      ['a 2 000-byte order', order(2_000), true],
      [
        'a 2-byte body with one header: too small to compress',
        { statusCode: 200, headers: { a: 'b' }, body: Buffer.from('ok') },
        false,
      ],
      ['no body', { statusCode: 204, headers: { etag: '"v1"' } }, false],
      ['a body left out (bodyOmitted)', { statusCode: 200, headers: {}, bodyOmitted: true }, false],
    ] as [string, StoredResponse, boolean][])(
      'writes %s in a form 0.1.0 reads (flags ≤ 15, JSON headers or packed), which this version reads back',
      async (_, response, packed) => {
        const id = newId();
        const key = `${prefix}:{${id}}`;
        const { record } = await compatible.claim(id, claimRequest());
        expect(await compatible.complete(id, record.ownerToken, response)).toBe(true);
        const [flags, headers] = await decodeAs010(key);
        expect(flags).toBeLessThanOrEqual(15);
        expect((flags & 8) !== 0).toBe(packed);
        if (!packed) expect(JSON.parse(headers)).toEqual(response.headers);
        expect((await compact.get(id))?.response).toEqual(response);
        expect((await compatible.get(id))?.response).toEqual(response);
      },
    );

    it('restores (repair from the durable tier) in the form 0.1.0 reads', async () => {
      const id = newId();
      const [seconds] = await redis.time();
      const now = Number(seconds) * 1000;
      const record = {
        state: 'completed' as const,
        fingerprint: newFingerprint(),
        ownerToken: newToken(),
        fencingToken: 2,
        createdAtMs: now - 1_000,
        leaseExpiresAtMs: now + 29_000,
        expiresAtMs: now + 60_000,
        response: order(300),
      };
      expect(await compatible.restore(id, record)).toBe(true);
      const [flags] = await decodeAs010(`${prefix}:{${id}}`);
      expect(flags).toBeLessThanOrEqual(15);
      expect(await compact.get(id)).toEqual(record);
    });

    it("reads, replays and is refused nothing of what the 'compact' format wrote (0.1.0 refuses it)", async () => {
      const id = newId();
      const key = `${prefix}:{${id}}`;
      const { record } = await compact.claim(id, claimRequest());
      expect(await compact.complete(id, record.ownerToken, order(300))).toBe(true);
      await expect(decodeAs010(key)).rejects.toThrow('inconsistent record fields');
      const replay = await compatible.claim(id, claimRequest());
      expect(replay.kind).toBe('existing');
      expect(replay.record.response).toEqual(order(300));
    });

    it('rejects an unknown record format', () => {
      expect(() => new RedisIdempotencyStore(redis, { recordFormat: 'json' as unknown as 'compact' })).toThrow(
        TypeError,
      );
    });
  });

  describe('minimum Redis version (7.0)', () => {
    /**
     * A stand-in for a Redis 6.2 server (none is installed here: the machine's redis-server is
     * 7.0): it speaks RESP and answers what 6.2 answers to the store's startup probe (an absent
     * record; `redis.REDIS_VERSION` is nil before 7.0) and to the claim script (`SET` rejects NX
     * with GET as a syntax error).
     */
    async function redis62(): Promise<{ url: string; close: () => void }> {
      const sockets = new Set<Socket>();
      const server = createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => undefined);
        let pending = Buffer.alloc(0);
        socket.on('data', (chunk: Buffer) => {
          pending = Buffer.concat([pending, chunk]);
          for (;;) {
            const parsed = parseCommand(pending);
            if (!parsed) return;
            pending = pending.subarray(parsed.used);
            if (parsed.args[0]?.toUpperCase() === 'QUIT') socket.end('+OK\r\n');
            else socket.write(answer62(parsed.args));
          }
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as { port: number };
      return {
        url: `redis://127.0.0.1:${port}`,
        close: () => {
          for (const socket of sockets) socket.destroy();
          server.close();
        },
      };
    }
    function parseCommand(data: Buffer): { args: string[]; used: number } | undefined {
      const text = data.toString('latin1');
      if (!text.startsWith('*')) return undefined;
      let at = text.indexOf('\r\n');
      if (at < 0) return undefined;
      const count = Number(text.slice(1, at));
      at += 2;
      const args: string[] = [];
      for (let i = 0; i < count; i++) {
        const end = text.indexOf('\r\n', at);
        if (end < 0) return undefined;
        const length = Number(text.slice(at + 1, end));
        if (text.length < end + 2 + length + 2) return undefined;
        args.push(text.slice(end + 2, end + 2 + length));
        at = end + 2 + length + 2;
      }
      return { args, used: at };
    }
    function answer62(args: string[]): string {
      const command = args[0]?.toUpperCase();
      const bulk = (value: string): string => `$${Buffer.byteLength(value)}\r\n${value}\r\n`;
      if (command === 'INFO') return bulk('# Server\r\nredis_version:6.2.14\r\nloading:0\r\n');
      if (command === 'EVALSHA') return '-NOSCRIPT No matching script. Please use EVAL.\r\n';
      if (command === 'EVAL' && args[1]?.includes("'NX', 'PXAT'")) {
        // What a script answers when it returns the error of redis.pcall (Redis 7.0 does the same).
        return '-ERR syntax error\r\n';
      }
      if (command === 'EVAL') return '$-1\r\n';
      return '+OK\r\n';
    }

    it('refuses to start on a server older than 7.0, naming the version it needs', async () => {
      const old = await redis62();
      const store = new RedisIdempotencyStore(old.url);
      try {
        const error = await store.onModuleInit().then(
          () => new Error('onModuleInit resolved'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        expect((error as Error).message).toMatch(/cannot start/);
        expect((error as Error).message).toMatch(/needs Redis 7\.0 or later/);
        expect((error as Error).message).toContain(old.url);
      } finally {
        await store.onApplicationShutdown();
        old.close();
      }
    });

    it('names the version it needs when a claim reaches an older server anyway (it was down at startup)', async () => {
      const old = await redis62();
      const store = new RedisIdempotencyStore(old.url);
      try {
        const error = await store.claim(newId(), claimRequest()).then(
          () => new Error('claim resolved'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        expect((error as Error).message).toMatch(/needs Redis 7\.0 or later/);
      } finally {
        await store.onApplicationShutdown();
        old.close();
      }
    });

    it('starts on this server (7.0 or later)', async () => {
      const store = new RedisIdempotencyStore(redis, { prefix: nextPrefix('version') });
      try {
        await expect(store.onModuleInit()).resolves.toBeUndefined();
      } finally {
        await store.onApplicationShutdown();
      }
    });
  });

  describe('unreadable records fail closed', () => {
    let store: RedisIdempotencyStore;
    let prefix: string;
    beforeEach(() => {
      prefix = nextPrefix('bad');
      store = new RedisIdempotencyStore(redis, { prefix });
    });
    afterEach(() => store.onApplicationShutdown());

    /** The raw value of a record the store wrote itself. */
    async function rawRecord(completed: boolean): Promise<Buffer> {
      const id = newId();
      const { record } = await store.claim(id, claimRequest());
      if (completed) await store.complete(id, record.ownerToken, sampleResponse());
      const raw = await redis.getBuffer(`${prefix}:{${id}}`);
      if (!raw) throw new Error('the store wrote no value');
      return raw;
    }
    const patched = (raw: Buffer, offset: number, value: number): Buffer => {
      const copy = Buffer.from(raw);
      copy[offset] = value;
      return copy;
    };

    const cases: [string, (key: string) => Promise<unknown>][] = [
      ['a hash (another data type)', (key) => redis.hset(key, { s: 'c', f: newFingerprint(), b: 'x' })],
      ['a list', (key) => redis.rpush(key, 'a', 'b')],
      ['a string that is not a record', (key) => redis.set(key, 'not a record')],
      ['an empty string', (key) => redis.set(key, '')],
      ['a truncated record', async (key) => redis.set(key, (await rawRecord(true)).subarray(0, 40))],
      ['a record of an unknown format version', async (key) => redis.set(key, patched(await rawRecord(true), 0, 9))],
      ['a record with impossible flags', async (key) => redis.set(key, patched(await rawRecord(true), 1, 2))],
      ['a record with fencing token 0', async (key) => redis.set(key, patched(await rawRecord(false), 5, 0))],
      [
        'an in-progress record followed by stray bytes',
        async (key) => redis.set(key, Buffer.concat([await rawRecord(false), Buffer.from('xx')])),
      ],
    ];

    it.each(cases)(
      'every operation rejects %s with IdempotencyStoreError and leaves it as it is',
      async (_name, write) => {
        const id = newId();
        const key = `${prefix}:{${id}}`;
        await write(key);
        const before = await redis.dumpBuffer(key);
        const operations: [string, () => Promise<unknown>][] = [
          ['get', () => store.get(id)],
          ['claim', () => store.claim(id, claimRequest())],
          ['takeOver', () => store.takeOver(id, newToken(), claimRequest())],
          ['complete', () => store.complete(id, newToken(), sampleResponse())],
          ['release', () => store.release(id, newToken())],
          ['extend', () => store.extend(id, newToken(), 1_000)],
          ['forceDelete (in-progress)', () => store.forceDelete(id, 'in-progress')],
          [
            'restore',
            () =>
              store.restore(id, {
                state: 'in_progress',
                fingerprint: newFingerprint(),
                ownerToken: newToken(),
                fencingToken: 1,
                createdAtMs: Date.now(),
                leaseExpiresAtMs: Date.now() + 1_000,
                expiresAtMs: Date.now() + 60_000,
              }),
          ],
        ];
        for (const [name, operation] of operations) {
          const error = await operation().then(
            () => new Error(`${name} resolved`),
            (e: unknown) => e,
          );
          expect(error).toBeInstanceOf(IdempotencyStoreError);
          expect((error as Error).message).toContain('unreadable');
          expect((error as Error).message).toContain(key);
        }
        expect(await redis.dumpBuffer(key)).toEqual(before);
      },
    );

    it('listInProgress skips every unreadable value and still lists the readable records; forceDelete any removes one', async () => {
      const ids = cases.map(() => newId());
      for (const [index, [, write]] of cases.entries()) await write(`${prefix}:{${ids[index]}}`);
      const readable = newId();
      await store.claim(readable, claimRequest());
      // (rawRecord() leaves readable records of its own under the prefix too.)
      const listed = (await store.listInProgress(0, 100)).map((entry) => entry.key);
      expect(listed).toContain(readable);
      expect(listed.filter((key) => ids.includes(key))).toEqual([]);
      expect(await store.forceDelete(ids[0], 'any')).toBe(true);
      expect(await redis.exists(`${prefix}:{${ids[0]}}`)).toBe(0);
    });

    it('says what to do about an unreadable record', async () => {
      const id = newId();
      await redis.set(`${prefix}:{${id}}`, 'x');
      await expect(store.get(id)).rejects.toThrow(/prefix of its own, or delete the key/);
    });
  });

  describe('reply decoders', () => {
    const b = (text: string): Buffer => Buffer.from(text);
    const inProgress = (): unknown[] => [0, 1, 1_000, 2_000, 3_000, 0, b('fp'), b('owner'), b(''), b('')];
    const completed = (): unknown[] => [
      1 | 4,
      2,
      1_000,
      2_000,
      3_000,
      201,
      b('fp'),
      b('owner'),
      b('{"a":"b","c":["d"]}'),
      b('body'),
    ];
    const context = 'claim of idem:{test}';
    const withField = (fields: unknown[], index: number, value: unknown): unknown[] =>
      fields.map((field, i) => (i === index ? value : field));

    it('decodes well-formed replies', () => {
      expect(decodeClaimReply([1, 5_000, ...inProgress()], context)).toEqual({
        kind: 'claimed',
        record: {
          state: 'in_progress',
          fingerprint: 'fp',
          ownerToken: 'owner',
          fencingToken: 1,
          createdAtMs: 1_000,
          leaseExpiresAtMs: 2_000,
          expiresAtMs: 3_000,
        },
      });
      const existing = decodeClaimReply([0, 5_000, ...completed()], context);
      expect(existing).toMatchObject({
        kind: 'existing',
        nowMs: 5_000,
        record: { state: 'completed', fencingToken: 2 },
      });
      expect(decodeGetReply(completed(), context)?.response).toEqual({
        statusCode: 201,
        headers: { a: 'b', c: ['d'] },
        body: b('body'),
      });
      expect(decodeGetReply(withField(withField(completed(), 0, 1 | 2), 9, b('')), context)?.response).toEqual({
        statusCode: 201,
        headers: { a: 'b', c: ['d'] },
        bodyOmitted: true,
      });
      const packedHeaders = JSON.stringify({
        location: '/orders/5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
        etag: 'W/"12c-hRHsEgdu8AZgWfBbyzCrl0WVcdk"',
      });
      const order = b(
        JSON.stringify({
          id: '5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
          status: 'confirmed',
          currency: 'EUR',
          totalCents: 3998,
        }),
      );
      const packed = withField(
        withField(withField(completed(), 0, 1 | 4 | 8), 8, b('')),
        9,
        packResponse(packedHeaders, order),
      );
      expect(decodeGetReply(packed, context)?.response).toEqual({
        statusCode: 201,
        headers: JSON.parse(packedHeaders),
        body: order,
      });
      expect(decodeGetReply(null, context)).toBeUndefined();
      expect(decodeFlagReply(1, context)).toBe(true);
      expect(decodeFlagReply(0, context)).toBe(false);
    });

    it.each<[string, unknown]>([
      ['nil', null],
      ['a status reply', 'OK'],
      ['an empty array', []],
      ['one element short', [1, 5_000, ...inProgress().slice(1)]],
      ['one element too many', [1, 5_000, ...inProgress(), 0]],
      ['claim kind 2', [2, 5_000, ...inProgress()]],
      ['the server time as a string', [1, '5000', ...inProgress()]],
      ['a fractional timestamp', [1, 5_000, ...withField(inProgress(), 2, 1_000.5)]],
      ['a timestamp beyond 2^53', [1, 5_000, ...withField(inProgress(), 4, 2 ** 53)]],
      ['the fingerprint as a string, not bytes', [1, 5_000, ...withField(inProgress(), 6, 'fp')]],
      ['a nil owner token', [1, 5_000, ...withField(inProgress(), 7, null)]],
      ['flags 8', [1, 5_000, ...withField(inProgress(), 0, 8)]],
      ['flags 32', [0, 5_000, ...withField(completed(), 0, 1 | 32)]],
      ['compact headers (flag 16) that do not decode', [0, 5_000, ...withField(completed(), 0, 1 | 16)]],
      [
        'compact headers inside a packed response',
        [0, 5_000, ...withField(withField(completed(), 0, 1 | 4 | 8 | 16), 8, b(''))],
      ],
      [
        'a packed response that does not unpack',
        [0, 5_000, ...withField(withField(completed(), 0, 1 | 4 | 8), 8, b(''))],
      ],
      ['headers beside a packed response', [0, 5_000, ...withField(completed(), 0, 1 | 4 | 8)]],
      ['body omitted on an in-progress record', [1, 5_000, ...withField(inProgress(), 0, 2)]],
      ['fencing token 0', [1, 5_000, ...withField(inProgress(), 1, 0)]],
      ['an in-progress record with a status code', [1, 5_000, ...withField(inProgress(), 5, 200)]],
      ['an in-progress record with a body', [1, 5_000, ...withField(inProgress(), 9, b('x'))]],
      ['a completed record with status 42', [0, 5_000, ...withField(completed(), 5, 42)]],
      ['body bytes without the body flag', [0, 5_000, ...withField(completed(), 0, 1)]],
      ['headers that are not JSON', [0, 5_000, ...withField(completed(), 8, b('{'))]],
      ['headers that are a JSON array', [0, 5_000, ...withField(completed(), 8, b('["a"]'))]],
      ['headers that are JSON null', [0, 5_000, ...withField(completed(), 8, b('null'))]],
      ['a numeric header value', [0, 5_000, ...withField(completed(), 8, b('{"a":1}'))]],
      ['a header array holding a number', [0, 5_000, ...withField(completed(), 8, b('{"a":["x",1]}'))]],
    ])('decodeClaimReply rejects %s with IdempotencyStoreError', (_name, reply) => {
      expect(() => decodeClaimReply(reply, context)).toThrow(IdempotencyStoreError);
    });

    it.each<[string, unknown]>([
      ['an empty array', []],
      ['a claim-shaped reply', [1, 5_000, ...inProgress()]],
      ['a string', 'record'],
    ])('decodeGetReply rejects %s', (_name, reply) => {
      expect(() => decodeGetReply(reply, context)).toThrow(IdempotencyStoreError);
    });

    it.each<[string, unknown]>([
      ['nil', null],
      ['2', 2],
      ['-1', -1],
      ['the string "1"', '1'],
      ['bytes "1"', b('1')],
      ['an array', [1]],
    ])('decodeFlagReply rejects %s', (_name, reply) => {
      expect(() => decodeFlagReply(reply, context)).toThrow(IdempotencyStoreError);
    });

    it('describes a bad reply by its shape, never by its content', () => {
      const secret = b('{"card":4242424242424242}');
      expect(() => decodeClaimReply([1, 5_000, ...withField(completed(), 8, secret)], context)).toThrow(
        /Unexpected reply from Redis to claim of idem:\{test\}/,
      );
      let message = '';
      try {
        decodeClaimReply([9, 5_000, ...withField(completed(), 9, secret)], context);
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toMatch(/claim kind 9/);
      expect(message).not.toContain('4242');
    });
  });

  describe('failing fast', () => {
    it('rejects claim with IdempotencyStoreError within 2 s once its redis-server is killed, and recovers when it is back', async () => {
      const server = await startRedisServer();
      const store = new RedisIdempotencyStore(server.url, { prefix: RUN });
      try {
        await store.onModuleInit();
        expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
        server.kill();
        // Right after the crash, then while ioredis keeps reconnecting.
        for (let attempt = 0; attempt < 4; attempt++) {
          const started = performance.now();
          const error = await store.claim(newId(), claimRequest()).then(
            () => new Error('claim resolved'),
            (e: unknown) => e,
          );
          expect(error).toBeInstanceOf(IdempotencyStoreError);
          expect((error as Error).message).toContain(`127.0.0.1:${server.port}`);
          expect(elapsedSince(started)).toBeLessThan(2_000);
          await sleep(300);
        }
        await server.stop();
        const revived = await startRedisServer({ port: server.port });
        try {
          const deadline = Date.now() + 5_000;
          for (;;) {
            const result = await store.claim(newId(), claimRequest()).catch((e: Error) => e);
            if (!(result instanceof Error)) {
              expect(result.kind).toBe('claimed');
              break;
            }
            if (Date.now() > deadline) throw result;
            await sleep(100);
          }
        } finally {
          await revived.stop();
        }
      } finally {
        await store.onApplicationShutdown();
        await server.stop();
      }
    });

    it('rejects within the 2 s command timeout when the server accepts connections but never answers', async () => {
      const sockets = new Set<Socket>();
      const silent = createServer((socket) => {
        sockets.add(socket);
        socket.on('error', () => undefined);
      });
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      const { port } = silent.address() as { port: number };
      const store = new RedisIdempotencyStore(`redis://127.0.0.1:${port}`);
      try {
        let started = performance.now();
        await expect(store.claim(newId(), claimRequest())).rejects.toThrow(IdempotencyStoreError);
        expect(elapsedSince(started)).toBeLessThan(3_000);
        started = performance.now();
        await store.onModuleInit();
        expect(elapsedSince(started)).toBeLessThan(3_000);
      } finally {
        await store.onApplicationShutdown();
        for (const socket of sockets) socket.destroy();
        silent.close();
      }
    });

    it('lets the application start while Redis is down, fails each request fast, and works once Redis is up', async () => {
      const port = await freePort();
      const store = new RedisIdempotencyStore(`redis://127.0.0.1:${port}`, { prefix: RUN });
      try {
        let started = performance.now();
        await store.onModuleInit();
        expect(elapsedSince(started)).toBeLessThan(2_000);
        started = performance.now();
        const error = await store.claim(newId(), claimRequest()).then(
          () => new Error('claim resolved'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        expect((error as Error).message).toContain(`redis://127.0.0.1:${port}`);
        expect(elapsedSince(started)).toBeLessThan(2_000);
        const server = await startRedisServer({ port });
        try {
          const deadline = Date.now() + 5_000;
          for (;;) {
            const result = await store.claim(newId(), claimRequest()).catch((e: Error) => e);
            if (!(result instanceof Error)) {
              expect(result.kind).toBe('claimed');
              break;
            }
            if (Date.now() > deadline) throw result;
            await sleep(100);
          }
        } finally {
          await server.stop();
        }
      } finally {
        await store.onApplicationShutdown();
      }
    });

    it('never puts the password of its URL in an error', async () => {
      const port = await freePort();
      const store = new RedisIdempotencyStore(`redis://app:s3cret-pass@127.0.0.1:${port}`);
      try {
        const error = await store.claim(newId(), claimRequest()).then(
          () => new Error('claim resolved'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        expect((error as Error).message).toContain(`127.0.0.1:${port}`);
        expect((error as Error).message).not.toContain('s3cret-pass');
      } finally {
        await store.onApplicationShutdown();
      }
    });

    it('fails startup (onModuleInit) with an actionable error when the server refuses the scripts (ACL)', async () => {
      const server = await startRedisServer();
      const admin = await openRedis(server.url);
      await admin.call('ACL', 'SETUSER', 'app', 'on', '>s3cret-pass', '~*', '&*', '+@all', '-@scripting');
      const store = new RedisIdempotencyStore(`redis://app:s3cret-pass@127.0.0.1:${server.port}`);
      try {
        const error = await store.onModuleInit().then(
          () => new Error('onModuleInit resolved'),
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyStoreError);
        expect((error as Error).message).toMatch(/cannot start/);
        expect((error as Error).message).toMatch(/ACL .*\+@scripting/);
        expect((error as Error).message).not.toContain('s3cret-pass');
      } finally {
        await store.onApplicationShutdown();
        await admin.quit();
        await server.stop();
      }
    });

    it('documents its fail-fast client options', () => {
      expect(REDIS_FAIL_FAST_OPTIONS).toMatchObject({
        connectTimeout: 2_000,
        commandTimeout: 2_000,
        maxRetriesPerRequest: 0,
        autoResendUnfulfilledCommands: false,
      });
      expect(Object.isFrozen(REDIS_FAIL_FAST_OPTIONS)).toBe(true);
    });
  });

  describe('waiters (pub/sub)', () => {
    it('wakes a waiter of another store instance on another connection (another pod)', async () => {
      const prefix = nextPrefix('pods');
      const podA = new RedisIdempotencyStore(redis, { prefix });
      const other = await openRedis();
      const podB = new RedisIdempotencyStore(other, { prefix });
      try {
        const id = newId();
        const { record } = await podA.claim(id, claimRequest());
        setTimeout(() => void podA.complete(id, record.ownerToken, sampleResponse()), 80);
        const started = performance.now();
        await podB.waitForChange(id, 5_000);
        expect(elapsedSince(started)).toBeLessThan(500);
        expect((await podB.get(id))?.state).toBe('completed');
      } finally {
        await podA.onApplicationShutdown();
        await podB.onApplicationShutdown();
        await other.quit();
      }
    });

    it('shares one subscriber connection among all waiters and unsubscribes each channel when its last waiter leaves', async () => {
      const prefix = nextPrefix('sub');
      const client = await openRedis();
      const duplicate = jest.spyOn(client, 'duplicate');
      const store = new RedisIdempotencyStore(client, { prefix });
      try {
        const ids = [newId(), newId(), newId()];
        const owners = await Promise.all(
          ids.map(async (id) => (await store.claim(id, claimRequest())).record.ownerToken),
        );
        const waits = [...ids, ids[0], ids[0]].map((id) => store.waitForChange(id, 5_000));
        for (const id of ids) await eventually(() => numsub(`${prefix}:done:{${id}}`), 1);
        expect(duplicate).toHaveBeenCalledTimes(1);

        await store.complete(ids[0], owners[0], sampleResponse());
        await store.release(ids[1], owners[1]);
        await eventually(() => numsub(`${prefix}:done:{${ids[0]}}`), 0);
        await eventually(() => numsub(`${prefix}:done:{${ids[1]}}`), 0);
        expect(await numsub(`${prefix}:done:{${ids[2]}}`)).toBe(1);

        const timedOut = store.waitForChange(ids[2], 100);
        await timedOut;
        await store.complete(ids[2], owners[2], sampleResponse());
        await Promise.all(waits);
        await eventually(() => numsub(`${prefix}:done:{${ids[2]}}`), 0);
        expect(duplicate).toHaveBeenCalledTimes(1);
      } finally {
        duplicate.mockRestore();
        await store.onApplicationShutdown();
        await client.quit();
      }
    });

    it('unsubscribes when the last waiter of a channel times out', async () => {
      const prefix = nextPrefix('timeout');
      const store = new RedisIdempotencyStore(redis, { prefix });
      try {
        const id = newId();
        await store.claim(id, claimRequest());
        const waiting = store.waitForChange(id, 150);
        await eventually(() => numsub(`${prefix}:done:{${id}}`), 1);
        await waiting;
        await eventually(() => numsub(`${prefix}:done:{${id}}`), 0);
      } finally {
        await store.onApplicationShutdown();
      }
    });
  });

  describe('lifecycle', () => {
    it('closes the client it created from a URL, and its subscriber, on shutdown; pending waiters resolve at once', async () => {
      const prefix = nextPrefix('owned');
      const store = new RedisIdempotencyStore(redisUrl(), { prefix });
      await store.onModuleInit();
      expect(store.client.status).toBe('ready');
      const id = newId();
      await store.claim(id, claimRequest());
      const waiting = store.waitForChange(id, 10_000);
      await eventually(() => numsub(`${prefix}:done:{${id}}`), 1);
      const started = performance.now();
      await store.onApplicationShutdown();
      await waiting;
      expect(elapsedSince(started)).toBeLessThan(500);
      expect(store.client.status).toBe('end');
      await eventually(() => numsub(`${prefix}:done:{${id}}`), 0);
      await expect(store.get(id)).rejects.toThrow(IdempotencyStoreError);
    });

    it('leaves a client it was given open on shutdown, and closes only its own subscriber', async () => {
      const prefix = nextPrefix('given');
      const client = await openRedis();
      const store = new RedisIdempotencyStore(client, { prefix });
      try {
        await store.onModuleInit();
        const id = newId();
        await store.claim(id, claimRequest());
        const waiting = store.waitForChange(id, 10_000);
        await eventually(() => numsub(`${prefix}:done:{${id}}`), 1);
        await store.onApplicationShutdown();
        await waiting;
        expect(client.status).toBe('ready');
        expect(await client.ping()).toBe('PONG');
        await eventually(() => numsub(`${prefix}:done:{${id}}`), 0);
        expect((await store.get(id))?.state).toBe('in_progress');
      } finally {
        await client.quit();
      }
    });

    it('shuts down a store that never connected without connecting', async () => {
      const store = new RedisIdempotencyStore(`redis://127.0.0.1:${await freePort()}`);
      expect(store.client.status).toBe('wait');
      await store.onApplicationShutdown();
      expect(store.client.status).toBe('end');
    });

    it('shuts down at once while its Redis is down (no socket left to wait for)', async () => {
      const store = new RedisIdempotencyStore(`redis://127.0.0.1:${await freePort()}`);
      await store.onModuleInit();
      await expect(store.get(newId())).rejects.toThrow(IdempotencyStoreError);
      const started = performance.now();
      await store.onApplicationShutdown();
      expect(elapsedSince(started)).toBeLessThan(200);
      expect(store.client.status).not.toBe('ready');
    });

    it('resolves waitForChange at once after shutdown', async () => {
      const store = new RedisIdempotencyStore(redis, { prefix: nextPrefix('closed') });
      await store.onApplicationShutdown();
      const started = performance.now();
      await store.waitForChange(newId(), 5_000);
      expect(elapsedSince(started)).toBeLessThan(100);
    });
  });

  describe('memory footprint (MEMORY USAGE)', () => {
    /** A 300-byte JSON order, as an orders API would answer (UUIDs and a timestamp: little to compress). */
    const body = (): Buffer => {
      const json = JSON.stringify({
        id: '5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
        customerId: '0b6b9c0e-2f4d-4d7a-9a77-5d1c7f3b8e21',
        status: 'paid',
        currency: 'EUR',
        items: [{ sku: 'SKU-1001', quantity: 2, unitPriceCents: 1999 }],
        totalCents: 3998,
        createdAt: '2026-11-22T21:55:00.000Z',
        ref: '',
      });
      return Buffer.from(
        json.replace(
          '"ref":""',
          `"ref":"${'9c4e2a7b1f3d5e8a0b6c4d2e9f7a1b3c5d8e0f2a4b6c8d0e1f3a5b7c9d2e4f6a'.slice(0, 300 - json.length)}"`,
        ),
      );
    };

    async function measure(headers: StoredResponse['headers']): Promise<number> {
      // The default prefix and a real-length id, so the key is as long as in production.
      const store = new RedisIdempotencyStore(redis);
      const id = newId();
      try {
        const { record } = await store.claim(id, claimRequest());
        const response: StoredResponse = { statusCode: 201, headers, body: body() };
        expect(response.body).toHaveLength(300);
        expect(await store.complete(id, record.ownerToken, response)).toBe(true);
        return Number(await redis.call('MEMORY', 'USAGE', `idem:{${id}}`));
      } finally {
        await redis.del(`idem:{${id}}`);
        await store.onApplicationShutdown();
      }
    }

    // Issue 31: records of the 310-byte order are no longer compressed (compressing cost more CPU
    // per request than the memory is worth); they may take up to the 632 bytes of the peer's.
    it('holds a completed record with a 300-byte order and three short headers in at most 632 bytes', async () => {
      const bytes = await measure({
        'content-type': 'application/json',
        location: '/orders/42',
        etag: 'W/"12c-1f3a"',
      });
      console.log(`MEMORY USAGE, completed record, 300-byte body, three short headers: ${bytes} bytes`);
      expect(bytes).toBeLessThanOrEqual(632);
    });

    it('holds one with three typical Express headers (UUID location, weak ETag) in at most 632 bytes', async () => {
      const bytes = await measure({
        'content-type': 'application/json; charset=utf-8',
        location: '/orders/5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
        etag: 'W/"12c-hRHsEgdu8AZgWfBbyzCrl0WVcdk"',
      });
      console.log(`MEMORY USAGE, completed record, 300-byte body, three typical Express headers: ${bytes} bytes`);
      expect(bytes).toBeLessThanOrEqual(632);
    });
  });
});

describe('RedisIdempotencyStore on a Redis Cluster (three throwaway masters)', () => {
  let cluster: ThrowawayRedisCluster;
  let client: Cluster;
  let counter = 0;

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    client = new Cluster([...cluster.nodes], { redisOptions: { commandTimeout: 2_000 } });
    client.on('error', () => undefined);
    expect(await client.ping()).toBe('PONG');
  });
  afterAll(async () => {
    await client?.quit();
    await cluster?.stop();
  });

  describeStoreContract('RedisIdempotencyStore (Redis Cluster)', async () => {
    const store = new RedisIdempotencyStore(client, { prefix: `cluster${counter++}` });
    await store.onModuleInit();
    return { store, cleanup: () => store.onApplicationShutdown() };
  });

  it('spreads records over every master, one slot per record (the hash tag)', async () => {
    const store = new RedisIdempotencyStore(client, { prefix: 'spread' });
    try {
      const ids = Array.from({ length: 60 }, () => newId());
      await Promise.all(ids.map((id) => store.claim(id, claimRequest())));
      const perMaster = await Promise.all(client.nodes('master').map((node) => node.dbsize()));
      expect(perMaster).toHaveLength(3);
      for (const count of perMaster) expect(count).toBeGreaterThan(0);
      for (const id of ids.slice(0, 5)) {
        expect(await client.call('CLUSTER', 'KEYSLOT', `spread:{${id}}`)).toBe(
          await client.call('CLUSTER', 'KEYSLOT', id),
        );
      }
    } finally {
      await store.onApplicationShutdown();
    }
  });
});
