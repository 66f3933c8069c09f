import { randomUUID } from 'node:crypto';
import { securityRecordId, startSecurityApp, type SecurityApp } from '../support/apps/security.app.js';
import { send, type HttpResult, type SendOptions } from '../support/http/send.js';
import { openBackend, type Backend } from './support/backends.js';
import { holding } from './support/stored-bytes.js';

/**
 * What the library keeps, and for whom (issue 5, item 5): records are scoped per tenant and
 * principal, no raw client key and no request header reaches storage, `Set-Cookie` is neither
 * stored nor replayed, and the size limits hold. Responses are stored in clear here, so any
 * leak would be visible in the raw bytes.
 */
describe.each([
  ['memory', 'express'],
  ['redis', 'express'],
  ['postgres', 'express'],
  ['memory', 'fastify'],
] as const)('scoping and storage on the %s backend (%s)', (name, platform) => {
  let backend: Backend;
  let close: (() => Promise<void>) | undefined;
  let fixture: SecurityApp;

  const post = (
    key: string | undefined,
    body: Record<string, unknown>,
    options: SendOptions & { tenant?: string; user?: string; path?: string } = {},
  ) =>
    send(fixture.url, options.path ?? backend.route, {
      key,
      body,
      headers: { 'X-Tenant-ID': options.tenant ?? 't1', 'X-User-ID': options.user ?? 'u1', ...options.headers },
    });
  const idOf = (key: string, tenant = 't1', user = 'u1', operation = backend.operation) =>
    securityRecordId(fixture, operation, key, tenant, user);
  const expectProblem = (res: HttpResult, status: number, code: string) => {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ status, code });
  };

  beforeAll(async () => {
    ({ backend, close } = await openBackend(name, 'sec-store'));
    fixture = await startSecurityApp(backend.store(), { durableStore: backend.durableStore }, false, platform);
  });
  afterAll(async () => {
    await fixture?.app.close();
    await close?.();
  });

  it('the same key from two tenants makes two records; neither replays the other', async () => {
    const key = randomUUID();
    const runs = fixture.counter.runs;
    const a = await post(key, { secret: 'tenant-a' }, { tenant: 'ta' });
    const b = await post(key, { secret: 'tenant-b' }, { tenant: 'tb' });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    expect(b.json().secret).toBe('tenant-b');
    expect(fixture.counter.runs).toBe(runs + 2);

    const retryA = await post(key, { secret: 'tenant-a' }, { tenant: 'ta' });
    const retryB = await post(key, { secret: 'tenant-b' }, { tenant: 'tb' });
    expect(retryA.body.equals(a.body)).toBe(true);
    expect(retryB.body.equals(b.body)).toBe(true);
    expect(fixture.counter.runs).toBe(runs + 2);
    expect(idOf(key, 'ta')).not.toBe(idOf(key, 'tb'));
  });

  it('the same key from two principals of one tenant makes two records; neither replays the other', async () => {
    const key = randomUUID();
    const runs = fixture.counter.runs;
    const alice = await post(key, { secret: 'alice' }, { user: 'alice' });
    const bob = await post(key, { secret: 'alice' }, { user: 'bob' });
    expect(bob.status).toBe(201);
    expect(bob.headers.get('idempotent-replayed')).toBeNull();
    expect(bob.json().run).not.toBe(alice.json().run);
    expect((await post(key, { secret: 'alice' }, { user: 'bob' })).body.equals(bob.body)).toBe(true);
    expect(fixture.counter.runs).toBe(runs + 2);
  });

  it('no raw client key reaches a storage key or a stored value, whatever the outcome', async () => {
    const key = `RAWKEY-${randomUUID()}`;
    expect((await post(key, { secret: 'x' })).status).toBe(201);
    expect((await post(key, { secret: 'x' })).headers.get('idempotent-replayed')).toBe('true');
    expect((await post(key, { secret: 'other payload' })).status).toBe(422);
    expect((await post(`"${key}-q"`, { secret: 'x' })).status).toBe(201);
    expect((await post(`${key}-fail`, { fail: true })).status).toBe(502);

    const stored = await backend.stored([idOf(key), idOf(`${key}-q`), idOf(`${key}-fail`)]);
    expect(stored.length).toBeGreaterThanOrEqual(2);
    expect(holding(stored, 'RAWKEY-')).toEqual([]);
    for (const { name } of stored) expect(name).toMatch(/[0-9a-f]{32}/);
  });

  it('request headers are never stored: authorization, cookies and API keys stay out', async () => {
    const key = randomUUID();
    const token = `TOKEN-${randomUUID()}`;
    const cookie = `COOKIE-${randomUUID()}`;
    const apiKey = `APIKEY-${randomUUID()}`;
    const headers = { Authorization: `Bearer ${token}`, Cookie: `sid=${cookie}`, 'X-Api-Key': apiKey };
    expect((await post(key, { secret: 'headers' }, { headers })).status).toBe(201);
    expect((await post(key, { secret: 'headers' }, { headers })).headers.get('idempotent-replayed')).toBe('true');

    const stored = await backend.stored([idOf(key)]);
    expect(stored.length).toBeGreaterThan(0);
    expect(holding(stored, 'headers')).not.toEqual([]); // the response itself is stored in clear
    for (const secret of [token, cookie, apiKey]) expect(holding(stored, secret)).toEqual([]);
  });

  it('Set-Cookie is neither stored nor replayed; the other response headers are', async () => {
    const key = randomUUID();
    const secret = `CRUMB-${randomUUID()}`;
    const first = await post(key, { secret });
    expect(first.headers.get('set-cookie')).toBe(`session=${secret}; HttpOnly`);
    const replay = await post(key, { secret });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('set-cookie')).toBeNull();
    expect(replay.headers.get('location')).toBe(`/secrets/${secret}`);

    const response = (await backend.storedResponse(idOf(key)))!;
    expect(Object.keys(response.headers)).not.toContain('set-cookie');
    expect(response.headers.location).toBe(`/secrets/${secret}`);
    expect(holding(await backend.stored([idOf(key)]), 'session=')).toEqual([]);
  });

  if (name === 'postgres') return; // the limits below act before any store access: memory and Redis show it

  it('a key longer than maxKeyLength is a 400 too_long problem: the handler does not run and nothing is stored', async () => {
    const key = 'k'.repeat(256);
    const runs = fixture.counter.runs;
    const before = (await backend.stored([idOf(key)])).length;
    const res = await post(key, { secret: 'long' });
    expectProblem(res, 400, 'idempotency_key_invalid');
    expect(res.json().reason).toBe('too_long');
    expect(fixture.counter.runs).toBe(runs);
    expect((await backend.stored([idOf(key)])).length).toBe(before);
  });

  it('a body larger than maxFingerprintedBodyBytes is a 413 problem: the handler does not run and nothing is stored', async () => {
    const key = randomUUID();
    const runs = fixture.counter.runs;
    const before = (await backend.stored([idOf(key, 't1', 'u1', 'secrets.small-body')])).length;
    const big = await post(key, { secret: 'y'.repeat(100) }, { path: '/secrets/small-body' });
    expectProblem(big, 413, 'idempotency_request_too_large');
    expect(big.json().maxBytes).toBe(64);
    expect(big.headers.get('idempotency-key')).toBe(key);
    expect(fixture.counter.runs).toBe(runs);
    expect((await backend.stored([idOf(key, 't1', 'u1', 'secrets.small-body')])).length).toBe(before);

    const small = await post(key, { secret: 'y' }, { path: '/secrets/small-body' });
    expect(small.status).toBe(201);
    expect(fixture.counter.runs).toBe(runs + 1);
  });

  it('a response above maxStoredResponseBytes is sent whole once, stored without its body, and retries get 409 replay-unavailable', async () => {
    const key = randomUUID();
    const runs = fixture.counter.runs;
    const first = await post(key, { secret: 'big' }, { path: '/secrets/big' });
    expect(first.status).toBe(201);
    expect(first.json().padding).toHaveLength(200);
    const retry = await post(key, { secret: 'big' }, { path: '/secrets/big' });
    expectProblem(retry, 409, 'idempotency_replay_unavailable');
    expect(retry.json().operationCompleted).toBe(true);
    expect(retry.headers.get('location')).toBe('/secrets/big');
    expect(retry.headers.get('retry-after')).toBeNull();
    expect(fixture.counter.runs).toBe(runs + 1);

    const response = (await backend.storedResponse(idOf(key, 't1', 'u1', 'secrets.big')))!;
    expect(response.bodyOmitted).toBe(true);
    expect(response.body ?? Buffer.alloc(0)).toHaveLength(0);
  });
});
