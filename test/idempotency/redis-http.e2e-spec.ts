import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { startContractApp, type ContractApp, type Platform } from '../support/apps/contract.app.js';
import { send } from '../support/http/send.js';
import { connectRedisOrFail, redisUrl } from '../support/servers/redis.js';
import { startRedisServer } from '../support/servers/redis-server.js';

const headers = { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' };

describe.each<Platform>(['express', 'fastify'])('Redis unavailable (%s)', (platform) => {
  let fixture: ContractApp;
  let server: Awaited<ReturnType<typeof startRedisServer>>;

  beforeAll(async () => {
    server = await startRedisServer();
    fixture = await startContractApp(platform, new RedisIdempotencyStore(server.url, { prefix: 'idem-down' }));
    // A first request proves the store works before the server goes away.
    const ok = await send(fixture.url, '/charges', { key: randomUUID(), body: {}, headers });
    expect(ok.status).toBe(201);
    await server.stop();
  });
  afterAll(async () => {
    await fixture?.app.close();
  });

  it('B.10 rule 32: fail-closed answers 503 idempotency-store-unavailable with Retry-After, and the handler does not run', async () => {
    const before = fixture.probe.runs;
    const res = await send(fixture.url, '/charges', { key: randomUUID(), body: { amount: 1 }, headers });
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.json().code).toBe('idempotency_store_unavailable');
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(fixture.probe.runs).toBe(before);
  });

  it("B.10 rule 32: 'fail-open' runs the handler unprotected, with no idempotency headers", async () => {
    const before = fixture.probe.runs;
    const res = await send(fixture.url, '/fail-open', { key: randomUUID(), headers });
    expect(res.status).toBe(201);
    expect(fixture.probe.runs).toBe(before + 1);
    expect(res.headers.get('idempotency-key')).toBeNull();
    expect(res.headers.get('idempotent-replayed')).toBeNull();
  });
});

describe.each<Platform>(['express', 'fastify'])('Redis round trips per request (%s)', (platform) => {
  let fixture: ContractApp;
  let monitor: Redis;
  const prefix = `idem-rt-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    await connectRedisOrFail();
    fixture = await startContractApp(platform, new RedisIdempotencyStore(redisUrl(), { prefix }));
    // Warm-up: the scripts get loaded (EVALSHA → NOSCRIPT → EVAL happens once per connection).
    const warm = randomUUID();
    await send(fixture.url, '/charges', { key: warm, body: {}, headers });
    await send(fixture.url, '/charges', { key: warm, body: {}, headers });
    monitor = new Redis(redisUrl());
  });
  afterAll(async () => {
    monitor?.disconnect();
    await fixture?.app.close();
  });

  /** Top-level commands that touch this suite's keys while `action` runs (script internals excluded). */
  async function countCommands(action: () => Promise<unknown>): Promise<string[]> {
    const seen: string[] = [];
    const feed = await monitor.monitor();
    feed.on('monitor', (_time: string, args: string[], source: string) => {
      if (source.includes('lua')) return;
      if (args.some((a) => a.includes(prefix))) seen.push(args[0].toLowerCase());
    });
    await new Promise((r) => setTimeout(r, 50));
    await action();
    await new Promise((r) => setTimeout(r, 100));
    feed.disconnect();
    return seen;
  }

  it('a fresh request costs exactly two round trips (claim, complete) and a replay one', async () => {
    const k = randomUUID();
    const fresh = await countCommands(() => send(fixture.url, '/charges', { key: k, body: { amount: 1 }, headers }));
    expect(fresh).toEqual(['evalsha', 'evalsha']);
    const replay = await countCommands(async () => {
      const res = await send(fixture.url, '/charges', { key: k, body: { amount: 1 }, headers });
      expect(res.headers.get('idempotent-replayed')).toBe('true');
    });
    expect(replay).toEqual(['evalsha']);
  });
});

describe('B.10 rule 31: durability across an application restart (Redis store)', () => {
  it('a completed record replays from a new application instance', async () => {
    await connectRedisOrFail();
    const prefix = `idem-restart-${randomUUID().slice(0, 8)}`;
    const k = randomUUID();
    const first = await startContractApp('express', new RedisIdempotencyStore(redisUrl(), { prefix }));
    const original = await send(first.url, '/charges', { key: k, body: { amount: 31 }, headers });
    await first.app.close();
    const second = await startContractApp('fastify', new RedisIdempotencyStore(redisUrl(), { prefix }));
    try {
      const retry = await send(second.url, '/charges', { key: k, body: { amount: 31 }, headers });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(original.body)).toBe(true);
      expect(second.probe.runs).toBe(0);
    } finally {
      await second.app.close();
    }
  });
});
