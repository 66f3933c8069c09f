import { randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import { MemoryIdempotencyStore, type IdempotencyStore } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { startContractApp, type ContractApp, type Platform } from '../support/apps/contract.app.js';
import { expectOneFreshTheRestBusyOrReplayed } from '../support/http/concurrency.js';
import { send, sendRawHeaders, type HttpResult, type SendOptions } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import { connectRedisOrFail, redisUrl } from '../support/servers/redis.js';
import { openRedisCluster, startRedisCluster, type ThrowawayRedisCluster } from '../support/servers/redis-cluster.js';

type StoreName = 'memory' | 'redis' | 'redis-cluster';

const PROBLEM_BASE = 'https://docs.example.test/problems/';

function makeStore(name: StoreName, cluster?: Cluster): IdempotencyStore {
  const prefix = `idem-contract-${randomUUID().slice(0, 8)}`;
  if (name === 'memory') return new MemoryIdempotencyStore();
  return new RedisIdempotencyStore(name === 'redis-cluster' ? cluster! : redisUrl(), { prefix });
}

const combos: Array<[Platform, StoreName]> = [
  ['express', 'memory'],
  ['fastify', 'memory'],
  ['express', 'redis'],
  ['fastify', 'redis'],
  // A three-master cluster of its own, started and stopped by the suite.
  ['express', 'redis-cluster'],
];

describe.each(combos)('HTTP contract on %s with the %s store', (platform, storeName) => {
  let fixture: ContractApp;
  const key = () => randomUUID();

  /** A request as tenant t1, user u1 unless told otherwise. */
  const call = (path: string, options: SendOptions & { tenant?: string | null; user?: string } = {}) => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.tenant !== null) headers['X-Tenant-ID'] = options.tenant ?? 't1';
    headers['X-User-ID'] = options.user ?? 'u1';
    return send(fixture.url, path, { ...options, headers });
  };

  const expectProblem = (res: HttpResult, status: number, kind: string) => {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.headers.get('content-language')).toBe('en');
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    const problem = res.json();
    expect(problem).toMatchObject({
      type: `${PROBLEM_BASE}${kind}`,
      status,
      code: kind.replaceAll('-', '_'),
    });
    expect(typeof problem.title).toBe('string');
    expect(typeof problem.detail).toBe('string');
    // B.11: every problem says whether the same request may be retried, and when.
    const retryable = kind === 'idempotency-request-in-progress' || kind === 'idempotency-store-unavailable';
    expect(problem.retryable).toBe(retryable);
    const retryAfter = res.headers.get('retry-after');
    expect(problem.retryAfter).toBe(retryAfter === null ? undefined : Number(retryAfter));
    return problem;
  };

  let cluster: ThrowawayRedisCluster | undefined;
  let clusterClient: Cluster | undefined;

  beforeAll(async () => {
    if (storeName === 'redis') await connectRedisOrFail();
    if (storeName === 'redis-cluster') {
      cluster = await startRedisCluster(3);
      clusterClient = await openRedisCluster(cluster);
    }
    fixture = await startContractApp(platform, makeStore(storeName, clusterClient));
  }, 60_000);
  afterAll(async () => {
    await fixture?.app.close();
    clusterClient?.disconnect();
    await cluster?.stop();
  });

  describe('B.1 applicability', () => {
    it('rule 1: a decorated POST with a key is protected: the retry is a replay', async () => {
      const k = key();
      const first = await call('/charges', { key: k, body: { amount: 1 } });
      const retry = await call('/charges', { key: k, body: { amount: 1 } });
      expect(first.status).toBe(201);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
    });

    it('rule 2: GET passes through untouched, even with a key: no record, no headers', async () => {
      const k = key();
      const a = await call('/charges', { method: 'GET', key: k });
      const b = await call('/charges', { method: 'GET', key: k });
      expect(b.json().seq).toBe(a.json().seq + 1);
      expect(a.headers.get('idempotency-key')).toBeNull();
      expect(b.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 2: PUT is not in the default methods, and an invalid key there is not even validated', async () => {
      const a = await call('/charges/7', { method: 'PUT', key: 'not,valid' });
      const b = await call('/charges/7', { method: 'PUT', key: 'not,valid' });
      expect(a.status).toBe(200);
      expect(b.json().seq).toBe(a.json().seq + 1);
      expect(a.headers.get('idempotency-key')).toBeNull();
    });

    it('rule 2: an undecorated route ignores the header', async () => {
      const k = key();
      const a = await call('/unprotected', { key: k });
      const b = await call('/unprotected', { key: k });
      expect(b.json().seq).toBe(a.json().seq + 1);
      expect(a.headers.get('idempotency-key')).toBeNull();
    });

    it('rule 3: a guard 401 runs before the layer and is never stored', async () => {
      const k = key();
      const denied = await call('/charges', { key: k, body: { amount: 3 }, headers: { 'X-Auth': 'deny' } });
      expect(denied.status).toBe(401);
      const allowed = await call('/charges', { key: k, body: { amount: 3 } });
      expect(allowed.status).toBe(201);
      expect(allowed.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 3: a malformed JSON body fails in the framework (400) and is never stored', async () => {
      const k = key();
      const bad = await call('/charges', { key: k, body: '{"amount": ' });
      expect(bad.status).toBe(400);
      const good = await call('/charges', { key: k, body: { amount: 3 } });
      expect(good.status).toBe(201);
      expect(good.headers.get('idempotent-replayed')).toBeNull();
    });
  });

  describe('B.2 key syntax and validation', () => {
    it('rule 4: several field lines are combined with commas, which makes the key invalid', async () => {
      const res = await sendRawHeaders(fixture.url, '/charges', [
        ['X-Tenant-ID', 't1'],
        ['X-User-ID', 'u1'],
        ['Idempotency-Key', 'abc'],
        ['Idempotency-Key', 'def'],
      ]);
      expectProblem(res, 400, 'idempotency-key-invalid');
    });

    it('rule 5: "abc" and abc name the same key (compat mode)', async () => {
      const raw = `k-${randomUUID()}`;
      const first = await call('/charges', { key: `"${raw}"`, body: { amount: 5 } });
      const retry = await call('/charges', { key: raw, body: { amount: 5 } });
      expect(first.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.headers.get('idempotency-key')).toBe(raw);
      expect(first.headers.get('idempotency-key')).toBe(`"${raw}"`);
    });

    it('rule 5: parameters of a quoted key are ignored; a bare key;v=1 is a literal key', async () => {
      const raw = `k-${randomUUID()}`;
      await call('/charges', { key: `"${raw}"`, body: { amount: 5 } });
      const withParams = await call('/charges', { key: `"${raw}";v=1`, body: { amount: 5 } });
      expect(withParams.headers.get('idempotent-replayed')).toBe('true');
      const bare = await call('/charges', { key: `${raw};v=1`, body: { amount: 5 } });
      expect(bare.status).toBe(201);
      expect(bare.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 5: sf-string mode rejects a bare token and accepts a quoted string', async () => {
      expectProblem(await call('/strict', { key: 'bare-token' }), 400, 'idempotency-key-invalid');
      expect((await call('/strict', { key: `"${randomUUID()}"` })).status).toBe(201);
    });

    it('rule 6: 255 characters are accepted, 256 are too long', async () => {
      expect((await call('/charges', { key: 'a'.repeat(254) + 'b', body: {} })).status).toBe(201);
      const tooLong = expectProblem(
        await call('/charges', { key: 'a'.repeat(256), body: {} }),
        400,
        'idempotency-key-invalid',
      );
      expect(tooLong.reason).toBe('too_long');
    });

    it('rule 6: keys are case-sensitive', async () => {
      const base = `case-${randomUUID()}`;
      const lower = await call('/charges', { key: base.toLowerCase(), body: { amount: 1 } });
      const upper = await call('/charges', { key: base.toUpperCase(), body: { amount: 1 } });
      expect(upper.json().seq).not.toBe(lower.json().seq);
      expect(upper.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 7: an empty string key is invalid and the handler does not run', async () => {
      const before = fixture.probe.runs;
      const res = expectProblem(await call('/charges', { key: '""', body: {} }), 400, 'idempotency-key-invalid');
      expect(res.reason).toBe('empty');
      expect(fixture.probe.runs).toBe(before);
    });

    it('rule 7: an empty field value is invalid', async () => {
      const res = await sendRawHeaders(fixture.url, '/charges', [
        ['X-Tenant-ID', 't1'],
        ['X-User-ID', 'u1'],
        ['Idempotency-Key', ''],
      ]);
      expectProblem(res, 400, 'idempotency-key-invalid');
    });

    it('rule 7: an invalid key is an error even on an optional route, and is not echoed', async () => {
      const res = await call('/charges', { key: 'has space', body: {} });
      expectProblem(res, 400, 'idempotency-key-invalid');
      expect(res.headers.get('idempotency-key')).toBeNull();
    });

    it('rule 9: an oversized header is rejected before Nest (not 2xx) and leaves no record', async () => {
      const k = key();
      const huge = await call('/charges', {
        key: k,
        body: { amount: 9 },
        headers: { 'X-Padding': 'p'.repeat(20_000) },
      });
      expect(huge.status).toBeGreaterThanOrEqual(400);
      const retry = await call('/charges', { key: k, body: { amount: 9 } });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 8: a missing key on a required route is 400 idempotency-key-missing', async () => {
      const before = fixture.probe.runs;
      expectProblem(await call('/required'), 400, 'idempotency-key-missing');
      expect(fixture.probe.runs).toBe(before);
    });

    it('rule 8: a missing key on an optional route runs unprotected, with no idempotency headers', async () => {
      const a = await call('/charges', { body: { amount: 8 } });
      const b = await call('/charges', { body: { amount: 8 } });
      expect(b.json().seq).toBe(a.json().seq + 1);
      expect(a.headers.get('idempotency-key')).toBeNull();
      expect(b.headers.get('idempotent-replayed')).toBeNull();
    });
  });

  describe('B.3 scope', () => {
    it('rule 10: record identity is (tenant, principal, operation, key): all equal means one record', async () => {
      const k = key();
      const a = await call('/charges', { key: k, body: { amount: 1 }, tenant: 'tenant-x', user: 'carol' });
      const b = await call('/charges', { key: k, body: { amount: 1 }, tenant: 'tenant-x', user: 'carol' });
      expect(b.headers.get('idempotent-replayed')).toBe('true');
      expect(b.body.equals(a.body)).toBe(true);
    });

    it('rule 11: the same key from another tenant is an independent record', async () => {
      const k = key();
      const a = await call('/charges', { key: k, body: { amount: 1 }, tenant: 'tenant-a' });
      const b = await call('/charges', { key: k, body: { amount: 1 }, tenant: 'tenant-b' });
      expect(b.json().seq).not.toBe(a.json().seq);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 11: the same key from another principal of the tenant never sees the record', async () => {
      const k = key();
      const a = await call('/charges', { key: k, body: { amount: 1 }, user: 'alice' });
      const b = await call('/charges', { key: k, body: { amount: 1 }, user: 'bob' });
      expect(b.json().seq).not.toBe(a.json().seq);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
    });

    it('rule 11: the same key on another operation is an independent record', async () => {
      const k = key();
      const a = await call('/charges', { key: k, body: { amount: 1 } });
      const b = await call('/charges/other-operation', { key: k, body: { amount: 1 } });
      expect(a.status).toBe(201);
      expect(b.status).toBe(201);
      expect(b.headers.get('idempotent-replayed')).toBeNull();
    });

    it("rule 12: with scope ['tenant'], another operation with the same key gets 422, never a replay", async () => {
      const k = key();
      expect((await call('/tenant-scope/a', { key: k, body: { amount: 1 } })).status).toBe(201);
      expectProblem(await call('/tenant-scope/b', { key: k, body: { amount: 1 } }), 422, 'idempotency-key-reused');
    });

    it("rule 12: with scope ['tenant'], another principal with the same key gets 422", async () => {
      const k = key();
      expect((await call('/tenant-scope/a', { key: k, body: { amount: 1 }, user: 'alice' })).status).toBe(201);
      expectProblem(
        await call('/tenant-scope/a', { key: k, body: { amount: 1 }, user: 'bob' }),
        422,
        'idempotency-key-reused',
      );
    });

    it('rule 13: an unresolvable tenant fails with 500 and never falls back to a global namespace', async () => {
      const before = fixture.probe.runs;
      expectProblem(
        await call('/charges', { key: key(), body: {}, tenant: null }),
        500,
        'idempotency-scope-unresolved',
      );
      expect(fixture.probe.runs).toBe(before);
    });
  });

  describe('B.4 fingerprint', () => {
    it('rule 15: JSON key order and whitespace do not change the fingerprint', async () => {
      const k = key();
      await call('/charges', { key: k, body: '{"amount":10,"currency":"EUR"}' });
      const retry = await call('/charges', { key: k, body: '{ "currency" : "EUR",\n "amount" : 10 }' });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
    });

    it('rule 15: 1 and 1.0 are different payloads (lossless numbers)', async () => {
      const k = key();
      await call('/charges', { key: k, body: '{"amount":1}' });
      expectProblem(await call('/charges', { key: k, body: '{"amount":1.0}' }), 422, 'idempotency-key-reused');
    });

    it('rule 14: the query is part of the fingerprint', async () => {
      const k = key();
      await call('/charges?capture=true', { key: k, body: { amount: 1 } });
      expectProblem(
        await call('/charges?capture=false', { key: k, body: { amount: 1 } }),
        422,
        'idempotency-key-reused',
      );
    });

    it('rule 14: configured headers take part in the fingerprint', async () => {
      const k = key();
      await call('/versioned', { key: k, headers: { 'Api-Version': '2024-01-01' } });
      expect(
        (await call('/versioned', { key: k, headers: { 'Api-Version': '2024-01-01' } })).headers.get(
          'idempotent-replayed',
        ),
      ).toBe('true');
      expectProblem(
        await call('/versioned', { key: k, headers: { 'Api-Version': '2025-01-01' } }),
        422,
        'idempotency-key-reused',
      );
    });

    it('rule 16: a custom fingerprint function replaces the built-in one', async () => {
      const k = key();
      await call('/custom-fingerprint', { key: k, body: { orderRef: 'A', note: 'first' } });
      const sameRef = await call('/custom-fingerprint', { key: k, body: { orderRef: 'A', note: 'edited' } });
      expect(sameRef.headers.get('idempotent-replayed')).toBe('true');
      expectProblem(
        await call('/custom-fingerprint', { key: k, body: { orderRef: 'B' } }),
        422,
        'idempotency-key-reused',
      );
    });

    it('rule 15: an empty body differs from {}', async () => {
      const k = key();
      await call('/charges', { key: k });
      expectProblem(await call('/charges', { key: k, body: {} }), 422, 'idempotency-key-reused');
    });
  });

  describe('B.5 processing order', () => {
    it('step 5.1: an expired record is absent: the same key is a new request', async () => {
      const k = key();
      const first = await call('/short-ttl', { key: k });
      await sleep(500);
      const later = await call('/short-ttl', { key: k });
      expect(later.json().seq).not.toBe(first.json().seq);
      expect(later.headers.get('idempotent-replayed')).toBeNull();
    });

    it('step 5.3: a mismatch is reported before in-progress (422 beats 409)', async () => {
      const k = key();
      const gate = `g-${k}`;
      const running = call('/charges', { key: k, body: { amount: 1, gate } });
      await sleep(100);
      expectProblem(await call('/charges', { key: k, body: { amount: 2, gate } }), 422, 'idempotency-key-reused');
      fixture.probe.open(gate);
      expect((await running).status).toBe(201);
    });
  });

  describe('B.6 response matrix', () => {
    it('replay is byte-identical, keeps the original status and headers, adds a fresh Date and the marker', async () => {
      const k = key();
      const first = await call('/charges', { key: k, body: { amount: 42 } });
      await sleep(1100);
      const retry = await call('/charges', { key: k, body: { amount: 42 } });
      expect(retry.status).toBe(201);
      expect(retry.body.equals(first.body)).toBe(true);
      for (const name of ['location', 'etag', 'x-order-seq', 'content-type']) {
        expect(retry.headers.get(name)).toBe(first.headers.get(name));
      }
      expect(retry.headers.get('content-length')).toBe(String(first.body.length));
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.headers.get('idempotency-key')).toBe(k);
      expect(retry.headers.get('date')).not.toBe(first.headers.get('date'));
    });

    it('B.8 rule 21: Set-Cookie and X-Request-Id are sent fresh but never replayed', async () => {
      const k = key();
      const first = await call('/charges', { key: k, body: { amount: 1 } });
      expect(first.headers.get('set-cookie')).toContain('session=');
      expect(first.headers.get('x-request-id')).not.toBeNull();
      const retry = await call('/charges', { key: k, body: { amount: 1 } });
      expect(retry.headers.get('set-cookie')).toBeNull();
      expect(retry.headers.get('x-request-id')).toBeNull();
    });

    it('the key is echoed verbatim on a first execution', async () => {
      const k = `"${randomUUID()}"`;
      const res = await call('/charges', { key: k, body: {} });
      expect(res.headers.get('idempotency-key')).toBe(k);
    });

    it('a replay of an empty 204 stays an empty 204', async () => {
      const k = key();
      expect((await call('/no-content', { key: k })).status).toBe(204);
      const retry = await call('/no-content', { key: k });
      expect(retry.status).toBe(204);
      expect(retry.body.length).toBe(0);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
    });

    it('original still running: 409 with Retry-After between 1 and 5 and the key echo, never stored', async () => {
      const k = key();
      const gate = `g-${k}`;
      const running = call('/charges', { key: k, body: { amount: 1, gate } });
      await sleep(100);
      const busy = await call('/charges', { key: k, body: { amount: 1, gate } });
      expectProblem(busy, 409, 'idempotency-request-in-progress');
      const retryAfter = Number(busy.headers.get('retry-after'));
      expect(Number.isInteger(retryAfter)).toBe(true);
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(5);
      expect(busy.headers.get('idempotency-key')).toBe(k);
      fixture.probe.open(gate);
      const done = await running;
      const replay = await call('/charges', { key: k, body: { amount: 1, gate } });
      expect(replay.body.equals(done.body)).toBe(true);
    });

    it('a mismatch carries the key echo and reveals nothing of the stored payload', async () => {
      const k = key();
      await call('/charges', { key: k, body: { amount: 1111 } });
      const res = await call('/charges', { key: k, body: { amount: 2222 } });
      expectProblem(res, 422, 'idempotency-key-reused');
      expect(res.headers.get('idempotency-key')).toBe(k);
      expect(res.text).not.toContain('1111');
    });

    it('CORS: Idempotency-Key is allowed and the idempotency headers are exposed', async () => {
      const preflight = await fetch(`${fixture.url}/charges`, {
        method: 'OPTIONS',
        headers: {
          Origin: 'https://app.example.test',
          'Access-Control-Request-Method': 'POST',
          'Access-Control-Request-Headers': 'idempotency-key,content-type',
        },
      });
      expect(preflight.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('idempotency-key');
      const res = await call('/charges', { key: key(), body: {}, headers: { Origin: 'https://app.example.test' } });
      const exposed = res.headers.get('access-control-expose-headers')?.toLowerCase() ?? '';
      for (const name of ['idempotent-replayed', 'idempotency-key', 'retry-after', 'location']) {
        expect(exposed).toContain(name);
      }
    });
  });

  describe('B.7 outcome policy', () => {
    it('rule 17: a 4xx produced by the handler is stored and replayed', async () => {
      const k = key();
      const first = await call('/status/402', { key: k });
      const retry = await call('/status/402', { key: k });
      expect(first.status).toBe(402);
      expect(retry.status).toBe(402);
      expect(retry.body.equals(first.body)).toBe(true);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
    });

    it('rule 17: a 5xx is released: the retry runs the handler again', async () => {
      const k = key();
      const first = await call('/status/500', { key: k });
      const retry = await call('/status/500', { key: k });
      expect(first.status).toBe(500);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(fixture.probe.runs).toBeGreaterThan(0);
      expect(retry.text).not.toBe(first.text);
    });

    it('rule 17: a 429 is released', async () => {
      const k = key();
      const first = await call('/status/429', { key: k });
      const retry = await call('/status/429', { key: k });
      expect(first.status).toBe(429);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(retry.text).not.toBe(first.text);
    });

    it('rule 19: IdempotencyFinalException stores even a 503', async () => {
      const k = key();
      const first = await call('/final', { key: k });
      const retry = await call('/final', { key: k });
      expect(first.status).toBe(503);
      expect(retry.status).toBe(503);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(first.body)).toBe(true);
    });

    it('rule 19: IdempotencyTransientException releases even a 402', async () => {
      const k = key();
      const first = await call('/transient', { key: k });
      const retry = await call('/transient', { key: k });
      expect(first.status).toBe(402);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(retry.text).not.toBe(first.text);
    });

    it('rule 19: @IdempotencyOutcome("release") and setOutcome("release") release a success', async () => {
      for (const path of ['/released-by-route', '/released-by-context']) {
        const k = key();
        const first = await call(path, { key: k });
        const retry = await call(path, { key: k });
        expect(retry.headers.get('idempotent-replayed')).toBeNull();
        expect(retry.json().seq).toBe(first.json().seq + 1);
      }
    });
  });

  describe('B.8 replay fidelity', () => {
    it('rule 24: Accept is not in the fingerprint: a retry with another Accept gets the original representation', async () => {
      const k = key();
      const first = await call('/charges', { key: k, body: { amount: 24 }, headers: { Accept: 'application/json' } });
      const retry = await call('/charges', { key: k, body: { amount: 24 }, headers: { Accept: 'text/html' } });
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.headers.get('content-type')).toBe(first.headers.get('content-type'));
      expect(retry.body.equals(first.body)).toBe(true);
    });

    it('rule 23: a response above maxStoredResponseBytes completes without a body: 409 replay-unavailable', async () => {
      const k = key();
      const first = await call('/big', { key: k });
      expect(first.status).toBe(201);
      const before = fixture.probe.runs;
      const retry = await call('/big', { key: k });
      const problem = expectProblem(retry, 409, 'idempotency-replay-unavailable');
      expect(problem.operationCompleted).toBe(true);
      expect(retry.headers.get('retry-after')).toBeNull();
      expect(retry.headers.get('location')).toBe(first.headers.get('location'));
      expect(fixture.probe.runs).toBe(before);
    });
  });

  describe('B.9 concurrency and stale leases', () => {
    it('rule 26: 50 concurrent requests with one key run the handler once; the others get 409 + Retry-After or a replay', async () => {
      const k = key();
      const before = fixture.probe.runs;
      const results = await Promise.all(
        Array.from({ length: 50 }, () => call('/charges', { key: k, body: { amount: 50 } })),
      );
      // The answers first: on a failure they say what happened instead of the bare run count.
      expectOneFreshTheRestBusyOrReplayed(results);
      expect(fixture.probe.runs - before).toBe(1);
    });

    it('rule 26: in wait mode, 50 concurrent requests all get the same 201', async () => {
      const k = key();
      const gate = `g-${k}`;
      const before = fixture.probe.runs;
      const pending = Array.from({ length: 50 }, () => call('/wait', { key: k, body: { gate } }));
      await sleep(200);
      fixture.probe.open(gate);
      const results = await Promise.all(pending);
      expect(fixture.probe.runs - before).toBe(1);
      for (const r of results) {
        expect(r.status).toBe(201);
        expect(r.body.equals(results[0].body)).toBe(true);
      }
      expect(results.filter((r) => r.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    });

    it('rule 25: a live handler keeps its claim past its TTL too: no second run while it runs', async () => {
      const k = key();
      const gate = `g-${k}`;
      const before = fixture.probe.runs;
      const running = call('/short-ttl', { key: k, body: { gate } });
      await sleep(700); // the record's TTL is 400 ms
      expectProblem(await call('/short-ttl', { key: k, body: { gate } }), 409, 'idempotency-request-in-progress');
      fixture.probe.open(gate);
      expect((await running).status).toBe(201);
      expect(fixture.probe.runs - before).toBe(1);
    });

    it('a client that disconnects mid-request: the handler finishes once, and the retry replays its real response (B.7 rule 17a)', async () => {
      const k = key();
      const gate = `g-${k}`;
      const before = fixture.probe.runs;
      const aborter = new AbortController();
      const gone = fetch(`${fixture.url}/charges`, {
        method: 'POST',
        headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1', 'Idempotency-Key': k, 'Content-Type': 'application/json' },
        body: JSON.stringify({ amount: 1, gate }),
        signal: aborter.signal,
      }).catch(() => 'aborted');
      await sleep(100);
      aborter.abort();
      expect(await gone).toBe('aborted');
      await sleep(50);
      fixture.probe.open(gate);
      await sleep(100);
      const retry = await call('/charges', { key: k, body: { amount: 1, gate } });
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.headers.get('location')).toMatch(/^\/charges\/\d+$/);
      expect(JSON.parse(retry.body.toString())).toMatchObject({ amount: 1 });
      expect(fixture.probe.runs - before).toBe(1);
    });

    it('a handler that writes its own response and waits for it to go out neither hangs nor runs twice', async () => {
      const k = key();
      const first = await call('/own-response', { key: k });
      expect(first.status).toBe(201);
      const retry = await call('/own-response', { key: k });
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(first.body)).toBe(true);
    });

    it('rule 25: a live handler keeps its claim past the lease through heartbeats', async () => {
      const k = key();
      const gate = `g-${k}`;
      const running = call('/short-lease', { key: k, body: { gate } });
      await sleep(900); // three leases of 300 ms
      expectProblem(await call('/short-lease', { key: k, body: { gate } }), 409, 'idempotency-request-in-progress');
      fixture.probe.open(gate);
      expect((await running).status).toBe(201);
    });
  });

  describe('B.11 problem types', () => {
    it('each problem kind has its own type URI under problemTypeBaseUri', async () => {
      const missing = expectProblem(await call('/required'), 400, 'idempotency-key-missing');
      const invalid = expectProblem(await call('/charges', { key: 'a,b', body: {} }), 400, 'idempotency-key-invalid');
      expect(missing.type).not.toBe(invalid.type);
      expect(missing.title).toBe('Idempotency-Key is missing');
      expect(invalid.title).toBe('Idempotency-Key is invalid');
    });
  });

  describe('IdempotencyContext', () => {
    it('derivedKey is stable across runs of the same request and differs per key and per name', async () => {
      const k = key();
      const first = await call('/context', { key: k, body: { release: true } });
      const second = await call('/context', { key: k, body: { release: true } });
      expect(second.json().seq).toBe(first.json().seq + 1); // released, so it ran again
      expect(first.json().payment).toMatch(/^idk_/);
      expect(second.json().payment).toBe(first.json().payment);
      const other = await call('/context', { key: key(), body: { release: true } });
      expect(other.json().payment).not.toBe(first.json().payment);
      expect(first.json().keyHash).not.toContain(k);
    });
  });

  describe('fencing (B.9 rules 27, 28)', () => {
    it('rule 27: after a dead lease, the next request takes over and runs fresh; the zombie cannot overwrite the winner', async () => {
      const k = key();
      const gate = `g-${k}`;
      const zombie = call('/short-lease', { key: k, body: { gate } });
      await sleep(100);
      fixture.heartbeats.freeze(); // the original's process stops renewing its lease
      await sleep(500);
      const winner = await call('/short-lease', { key: k, body: { gate } });
      fixture.heartbeats.thaw();
      expect(winner.status).toBe(201);
      expect(winner.headers.get('idempotent-replayed')).toBeNull();
      expect(winner.json()).toMatchObject({ fencing: 2, tookOver: true });
      fixture.probe.open(gate);
      const zombieAnswer = await zombie;
      expect(zombieAnswer.json().fencing).toBe(1);
      const retry = await call('/short-lease', { key: k, body: { gate } });
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(winner.body)).toBe(true);
      expect(retry.body.equals(zombieAnswer.body)).toBe(false);
    });

    it("rule 28: staleLock 'fail' stores a final 500 idempotency-outcome-unknown, replayed afterwards", async () => {
      const k = key();
      const gate = `g-${k}`;
      const zombie = call('/stale-fail', { key: k, body: { gate } });
      await sleep(100);
      fixture.heartbeats.freeze();
      await sleep(500);
      const before = fixture.probe.runs;
      const first = await call('/stale-fail', { key: k, body: { gate } });
      fixture.heartbeats.thaw();
      expectProblem(first, 500, 'idempotency-outcome-unknown');
      expect(fixture.probe.runs).toBe(before);
      fixture.probe.open(gate);
      expect((await zombie).status).toBe(201);
      const retry = await call('/stale-fail', { key: k, body: { gate } });
      expect(retry.status).toBe(500);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.equals(first.body)).toBe(true);
    });
  });
});

describe.each<Platform>(['express', 'fastify'])('B.12 alternative configuration (%s, memory store)', (platform) => {
  let fixture: ContractApp;
  const call = (path: string, options: SendOptions = {}) =>
    send(fixture.url, path, { ...options, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1', ...options.headers } });

  beforeAll(async () => {
    fixture = await startContractApp(platform, new MemoryIdempotencyStore(), {
      mismatchStatus: 409,
      replayHeader: { name: 'X-Idempotent-Replayed', onFresh: true, format: 'sf-boolean' },
      storeServerErrors: true,
      storeClientErrors: false,
      echoKey: false,
      docsUrl: 'https://docs.example.test/idempotency',
    });
  });
  afterAll(async () => {
    await fixture?.app.close();
  });

  it('mismatchStatus 409 (brandur) answers a reused key with 409 idempotency-key-reused', async () => {
    const k = randomUUID();
    await call('/charges', { key: k, body: { amount: 1 } });
    const res = await call('/charges', { key: k, body: { amount: 2 } });
    expect(res.status).toBe(409);
    expect(res.json()).toMatchObject({ code: 'idempotency_key_reused', status: 409 });
  });

  it('replayHeader: a custom name, sent on fresh executions too, as an RFC 9651 Boolean', async () => {
    const k = randomUUID();
    const first = await call('/charges', { key: k, body: {} });
    const retry = await call('/charges', { key: k, body: {} });
    expect(first.headers.get('x-idempotent-replayed')).toBe('?0');
    expect(retry.headers.get('x-idempotent-replayed')).toBe('?1');
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
  });

  it('echoKey false: no key echo', async () => {
    const res = await call('/charges', { key: randomUUID(), body: {} });
    expect(res.headers.get('idempotency-key')).toBeNull();
  });

  it('docsUrl: problems carry Link rel="describedby"', async () => {
    const res = await call('/charges', { key: 'a,b', body: {} });
    expect(res.status).toBe(400);
    expect(res.headers.get('link')).toBe(
      '<https://docs.example.test/idempotency>; rel="describedby"; type="text/html"',
    );
  });

  it('B.7 rule 18: storeServerErrors stores and replays a 500, but still releases a 429', async () => {
    const k = randomUUID();
    const first = await call('/status/500', { key: k });
    const retry = await call('/status/500', { key: k });
    expect(retry.status).toBe(500);
    expect(retry.headers.get('x-idempotent-replayed')).toBe('?1');
    expect(retry.body.equals(first.body)).toBe(true);
    const k2 = randomUUID();
    const limited = await call('/status/429', { key: k2 });
    const again = await call('/status/429', { key: k2 });
    expect(again.headers.get('x-idempotent-replayed')).toBe('?0');
    expect(again.text).not.toBe(limited.text);
  });

  it('B.7 rule 20: storeClientErrors false releases a 402', async () => {
    const k = randomUUID();
    const first = await call('/status/402', { key: k });
    const retry = await call('/status/402', { key: k });
    expect(retry.headers.get('x-idempotent-replayed')).toBe('?0');
    expect(retry.text).not.toBe(first.text);
  });
});
