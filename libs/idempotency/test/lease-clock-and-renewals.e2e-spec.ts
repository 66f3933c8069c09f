import { jest } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import {
  IdempotencyService,
  MemoryIdempotencyStore,
  type ClaimResult,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import type { IdempotencyClaim } from '../src/engine/idempotency-claim.js';
import { buildScopedKey, type ScopedKey } from '../src/engine/scoped-key.js';
import { resolvePolicy, type ResolvedPolicy } from '../src/idempotency.options.js';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { IDEMPOTENCY_TYPEORM_ENTITIES, TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { resolveModuleSettings } from '../src/idempotency.options.js';
import { claimRequest, newId, sleep } from '../src/testing/contract-fixtures.js';
import { openIdempotencyDataSource } from '../../../test/support/servers/idempotency-data-source.js';
import {
  connectPostgresOrFail,
  createThrowawaySchema,
  dropSchema,
  TEST_DATABASE_URL,
} from '../../../test/support/servers/postgres.js';
import { deleteKeys, openRedis, redisUrl } from '../../../test/support/servers/redis.js';
import { waitUntil } from '../../../test/support/timing.js';
import { startTcpProxy, type TcpProxy } from '../../../test/support/net/tcp-proxy.js';

/**
 * Leases are judged by the servers' clocks and renewed tier by tier (DESIGN "The flow of one
 * request", steps 5 and 7), on real PostgreSQL and Redis:
 * - a node whose clock runs ahead does not see a live durable lease as lapsed, so it can neither
 *   take the claim over nor run the handler beside its owner;
 * - a hung database does not stop the Redis renewals, nor a hung Redis the database's (a TCP
 *   proxy of our own swallows every byte of one server while the other answers);
 * - on a durable route the durable lease is the one that counts: a refusal by the database loses
 *   the claim, a refusal by Redis alone does not.
 */

/** How far the skewed node's clock runs ahead: far more than any lease in these tests. */
const SKEW_MS = 10 * 60_000;
const FINGERPRINT = 'f'.repeat(43);

const realNow = Date.now.bind(Date);

/** Runs `work` on a host whose clock (`Date.now()`) runs `SKEW_MS` ahead of the servers'. */
async function withClockAhead<T>(work: () => Promise<T>): Promise<T> {
  const clock = jest.spyOn(Date, 'now').mockImplementation(() => realNow() + SKEW_MS);
  try {
    return await work();
  } finally {
    clock.mockRestore();
  }
}

function scopedKey(): ScopedKey {
  return buildScopedKey({ operation: 'orders.create', tenant: 't1', key: randomUUID() }, ['tenant', 'operation']);
}

async function claimedBy(
  engine: IdempotencyService,
  scoped: ScopedKey,
  policy: ResolvedPolicy,
): Promise<IdempotencyClaim> {
  const begun = await engine.begin({ scoped, fingerprint: FINGERPRINT, policy });
  if (begun.kind !== 'claimed') throw new Error(`expected a claim, got ${begun.kind}`);
  return begun.claim;
}

/** What a second claimant sees: the record as it is, with the store's own clock (`claim` of a held key changes nothing). */
async function seenBy(store: Pick<IdempotencyStore, 'claim'>, id: string) {
  const seen: ClaimResult = await store.claim(id, claimRequest());
  if (seen.kind !== 'existing') throw new Error('expected the record to exist');
  return seen;
}

describe('durable leases are judged by the database clock (PostgreSQL)', () => {
  let schema: string;
  let dataSource: DataSource;

  beforeAll(async () => {
    schema = await createThrowawaySchema('lease_clock');
    dataSource = await openIdempotencyDataSource(schema);
  });

  afterAll(async () => {
    if (dataSource?.isInitialized) await dataSource.destroy();
    if (schema) await dropSchema(schema);
  });

  it('a node whose clock runs ten minutes ahead sees a live lease as live, cannot take it over, and writes times of the database', async () => {
    const owner = new TypeOrmIdempotencyStore(dataSource);
    const skewed = new TypeOrmIdempotencyStore(dataSource);
    const key = newId();
    const claimed = await owner.claim(key, claimRequest({ leaseMs: 60_000, ttlMs: 3_600_000 }));
    if (claimed.kind !== 'claimed') throw new Error('expected a claim');
    const { record } = claimed;

    await withClockAhead(async () => {
      // By this host's clock the lease lapsed minutes ago.
      expect(Date.now()).toBeGreaterThan(record.leaseExpiresAtMs);
      const seen = await seenBy(skewed, key);
      expect(seen.record).toEqual(record);
      expect(seen.nowMs).toBeLessThan(record.leaseExpiresAtMs);
      const takeOver = await skewed.takeOver(key, record.ownerToken, claimRequest());
      expect(takeOver).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      expect(await skewed.get(key)).toEqual(record);

      const other = await skewed.claim(newId(), claimRequest({ leaseMs: 60_000, ttlMs: 3_600_000 }));
      expect(other.record.createdAtMs).toBeLessThanOrEqual(realNow());
      expect(other.record.createdAtMs).toBeGreaterThan(realNow() - 60_000);
    });

    expect(await owner.extend(key, record.ownerToken, 60_000)).toBe(true);
    expect((await owner.get(key))?.ownerToken).toBe(record.ownerToken);
  });

  it('the reaper of a node whose clock runs ahead deletes only what the database says has expired', async () => {
    const store = new TypeOrmIdempotencyStore(dataSource);
    const live = newId();
    const expiring = newId();
    // Two minutes to live: expired by the skewed node's clock, live by the database's.
    await store.claim(live, claimRequest({ leaseMs: 60_000, ttlMs: 120_000 }));
    await store.claim(expiring, claimRequest({ leaseMs: 100, ttlMs: 200 }));
    await sleep(250);
    await withClockAhead(async () => {
      expect(await store.deleteExpired(100)).toBe(1);
    });
    expect(await store.get(live)).toBeDefined();
  });

  it('an engine on a node whose clock runs ahead answers in progress instead of running the handler beside the owner', async () => {
    const policy = resolvePolicy({}, { durable: true, leaseMs: 60_000 });
    const durable = new TypeOrmIdempotencyStore(dataSource);
    // Each node has a fast tier of its own: the skewed node's has no record, as after a Redis
    // failover, so the durable row decides.
    const ownerNode = new IdempotencyService(new MemoryIdempotencyStore(), resolveModuleSettings({}), durable);
    const skewedNode = new IdempotencyService(
      new MemoryIdempotencyStore(),
      resolveModuleSettings({}),
      new TypeOrmIdempotencyStore(dataSource),
    );
    try {
      const scoped = scopedKey();
      const claim = await claimedBy(ownerNode, scoped, policy);
      const duplicate = await withClockAhead(() => skewedNode.begin({ scoped, fingerprint: FINGERPRINT, policy }));
      expect(duplicate).toEqual({ kind: 'in-progress', retryAfterSeconds: 5 });
      const row = await durable.get(scoped.id);
      expect(row).toMatchObject({ state: 'in_progress', ownerToken: claim.ownerToken, fencingToken: 1 });
      expect(claim.lost).toBe(false);
    } finally {
      ownerNode.onApplicationShutdown();
      skewedNode.onApplicationShutdown();
    }
  });
});

describe('each tier renews its lease on its own beat (real PostgreSQL and Redis behind TCP proxies)', () => {
  /** Short enough to watch several leases go by, long enough for a busy machine. */
  const LEASE_MS = 1_000;
  const policy = resolvePolicy({}, { durable: true, leaseMs: LEASE_MS, heartbeatMs: 200, ttlMs: 60_000 });
  const prefix = `lease-renewals-${randomUUID()}`;
  let schema: string;
  let dataSource: DataSource;
  let redis: Redis;
  let pgProxy: TcpProxy;
  let redisProxy: TcpProxy;
  let proxiedDataSource: DataSource;
  let proxiedRedis: Redis;
  const engines: IdempotencyService[] = [];

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    redis = await openRedis();
    schema = await createThrowawaySchema('lease_renewals');
    dataSource = await openIdempotencyDataSource(schema);
    const pg = new URL(TEST_DATABASE_URL);
    pgProxy = await startTcpProxy(Number(pg.port || 5432), pg.hostname);
    const proxiedUrl = new URL(TEST_DATABASE_URL);
    proxiedUrl.hostname = '127.0.0.1';
    proxiedUrl.port = String(pgProxy.port);
    proxiedDataSource = await new DataSource({
      type: 'postgres',
      url: proxiedUrl.toString(),
      schema,
      extra: { options: `-c search_path=${schema}` },
      entities: IDEMPOTENCY_TYPEORM_ENTITIES,
    }).initialize();
    const direct = new URL(redisUrl());
    redisProxy = await startTcpProxy(Number(direct.port || 6379), direct.hostname);
    // No command timeout: a renewal through the silent proxy hangs until the connection is reset.
    proxiedRedis = new Redis(redisProxy.port, '127.0.0.1', { maxRetriesPerRequest: 0 });
    proxiedRedis.on('error', () => undefined);
  });

  afterEach(() => {
    pgProxy.restore();
    redisProxy.restore();
    for (const engine of engines.splice(0)) engine.onApplicationShutdown();
  });

  afterAll(async () => {
    proxiedRedis?.disconnect();
    if (proxiedDataSource?.isInitialized) await proxiedDataSource.destroy();
    await pgProxy?.close();
    await redisProxy?.close();
    if (dataSource?.isInitialized) await dataSource.destroy();
    if (schema) await dropSchema(schema);
    if (redis) {
      await deleteKeys(redis, prefix);
      await redis.quit();
    }
  });

  function engineOn(fast: IdempotencyStore, durable: TypeOrmIdempotencyStore): IdempotencyService {
    const engine = new IdempotencyService(fast, resolveModuleSettings({}), durable);
    engines.push(engine);
    return engine;
  }

  it('while the database hangs, the Redis lease keeps being renewed', async () => {
    const fast = new RedisIdempotencyStore(redis, { prefix });
    const engine = engineOn(fast, new TypeOrmIdempotencyStore(proxiedDataSource));
    const observer = new TypeOrmIdempotencyStore(dataSource);
    const scoped = scopedKey();
    const claim = await claimedBy(engine, scoped, policy);
    const atFreeze = await seenBy(fast, scoped.id);

    pgProxy.blackhole();
    await sleep(3 * LEASE_MS);

    const redisNow = await seenBy(fast, scoped.id);
    expect(redisNow.nowMs).toBeGreaterThan(atFreeze.record.leaseExpiresAtMs + LEASE_MS);
    expect(redisNow.record.ownerToken).toBe(claim.ownerToken);
    expect(redisNow.record.leaseExpiresAtMs).toBeGreaterThan(redisNow.nowMs);
    // The database's renewals did hang: its lease lapsed meanwhile.
    const row = await seenBy(observer, scoped.id);
    expect(row.record.leaseExpiresAtMs).toBeLessThanOrEqual(row.nowMs);
    expect(claim.lost).toBe(false);

    // Once the database answers again, its lease is renewed too.
    pgProxy.restore();
    await waitUntil(
      async () => {
        const { record, nowMs } = await seenBy(observer, scoped.id);
        return record.leaseExpiresAtMs > nowMs;
      },
      10 * LEASE_MS,
      'the durable lease is renewed again',
    );
    expect(claim.lost).toBe(false);
  });

  it('while Redis hangs, the database lease keeps being renewed', async () => {
    const fast = new RedisIdempotencyStore(proxiedRedis, { prefix });
    const engine = engineOn(fast, new TypeOrmIdempotencyStore(dataSource));
    const observer = new TypeOrmIdempotencyStore(dataSource);
    const redisObserver = new RedisIdempotencyStore(redis, { prefix });
    const scoped = scopedKey();
    const claim = await claimedBy(engine, scoped, policy);
    const atFreeze = await seenBy(observer, scoped.id);

    redisProxy.blackhole();
    await sleep(3 * LEASE_MS);

    const row = await seenBy(observer, scoped.id);
    expect(row.nowMs).toBeGreaterThan(atFreeze.record.leaseExpiresAtMs + LEASE_MS);
    expect(row.record.ownerToken).toBe(claim.ownerToken);
    expect(row.record.leaseExpiresAtMs).toBeGreaterThan(row.nowMs);
    // Redis's renewals did hang: its lease lapsed meanwhile.
    const fastRecord = await seenBy(redisObserver, scoped.id);
    expect(fastRecord.record.leaseExpiresAtMs).toBeLessThanOrEqual(fastRecord.nowMs);
    expect(claim.lost).toBe(false);
  });

  it('on a durable route a refusal by Redis alone keeps the claim; a refusal by the database loses it', async () => {
    const fast = new MemoryIdempotencyStore();
    const durable = new TypeOrmIdempotencyStore(dataSource);
    const engine = engineOn(fast, durable);

    const keptScope = scopedKey();
    const kept = await claimedBy(engine, keptScope, policy);
    expect(await fast.forceDelete(keptScope.id, 'any')).toBe(true);
    await sleep(3 * LEASE_MS);
    expect(kept.lost).toBe(false);
    const row = await seenBy(durable, keptScope.id);
    expect(row.record.ownerToken).toBe(kept.ownerToken);
    expect(row.record.leaseExpiresAtMs).toBeGreaterThan(row.nowMs);

    const lostScope = scopedKey();
    const lost = await claimedBy(engine, lostScope, policy);
    expect(await durable.forceDelete(lostScope.id)).toBe(true);
    await waitUntil(async () => lost.lost, 10 * LEASE_MS, 'the claim is lost');
    // The fast record was still renewed, and still is this claim's: the database decided.
    expect((await fast.get(lostScope.id))?.ownerToken).toBe(lost.ownerToken);
  });
});
