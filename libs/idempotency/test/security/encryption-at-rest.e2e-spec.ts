import { randomBytes, randomUUID } from 'node:crypto';
import { IdempotencyService, type IdempotencyEncryptionOptions } from 'nestjs-idempotency';
import { IdempotencyCipher } from '../../src/security/idempotency-cipher.js';
import { buildScopedKey } from '../../src/engine/scoped-key.js';
import { resolvePolicy } from '../../src/idempotency.options.js';
import { startSecurityApp, type SecurityApp } from '../../../../test/support/apps/security.app.js';
import { send, type HttpResult } from '../../../../test/support/http/send.js';
import { sleep } from '../../../../test/support/timing.js';
import { openBackend, type Backend } from '../../../../test/security/support/backends.js';
import { holding } from '../../../../test/security/support/stored-bytes.js';

const k1 = { id: 'k1', key: randomBytes(32) };
const k2 = { id: 'k2', key: randomBytes(32) };
const ringK1: IdempotencyEncryptionOptions = { keys: [k1], activeKeyId: 'k1' };
const rotated: IdempotencyEncryptionOptions = { keys: [k1, k2], activeKeyId: 'k2' };
const onlyK2: IdempotencyEncryptionOptions = { keys: [k2], activeKeyId: 'k2' };

function expectUnreadable(res: HttpResult): void {
  expect(res.status).toBe(500);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(res.json()).toMatchObject({ status: 500, code: 'idempotency_record_unreadable' });
  expect(res.headers.get('idempotent-replayed')).toBeNull();
}

describe.each(['memory', 'redis', 'postgres'] as const)('encryption at rest on the %s backend', (name) => {
  let backend: Backend;
  let close: (() => Promise<void>) | undefined;
  const apps: SecurityApp[] = [];

  const start = async (encryption?: IdempotencyEncryptionOptions): Promise<SecurityApp> => {
    const app = await startSecurityApp(backend.store(), { encryption, durableStore: backend.durableStore });
    apps.push(app);
    return app;
  };
  const post = (app: SecurityApp, key: string, secret: string) =>
    send(app.url, backend.route, { key, body: { secret }, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });
  /** The storage id of a record of the fixture (its scope: tenant, principal, operation). */
  const idOf = (key: string) =>
    buildScopedKey({ operation: backend.operation, tenant: 't1', principal: 'u1', key }, [
      'tenant',
      'principal',
      'operation',
    ]).id;
  /** Stores one response with `first`, stops that app, and starts another with `then`: a restart with a new configuration. */
  const storeThenRestart = async (
    key: string,
    secret: string,
    first: IdempotencyEncryptionOptions | undefined,
    then: IdempotencyEncryptionOptions | undefined,
  ): Promise<{ stored: HttpResult; app: SecurityApp }> => {
    const before = await start(first);
    const stored = await post(before, key, secret);
    expect(stored.status).toBe(201);
    await before.app.close();
    apps.splice(apps.indexOf(before), 1);
    return { stored, app: await start(then) };
  };

  beforeAll(async () => {
    ({ backend, close } = await openBackend(name, 'sec-enc'));
  });
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.app.close();
  });
  afterAll(async () => {
    await close?.();
  });

  it('stores neither the body nor the headers in clear, and replays the original bytes', async () => {
    const app = await start(ringK1);
    const key = randomUUID();
    const secret = `SECRET-${randomUUID()}`;
    const first = await post(app, key, secret);
    const retry = await post(app, key, secret);
    expect(first.status).toBe(201);
    expect(first.text).toContain(secret);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    expect(retry.headers.get('location')).toBe(`/secrets/${secret}`);
    expect(app.counter.runs).toBe(1);

    const stored = await backend.stored([idOf(key)]);
    expect(stored.length).toBeGreaterThan(0);
    expect(holding(stored, secret)).toEqual([]);
    expect(holding(stored, 'application/json')).toEqual([]);
    expect(IdempotencyCipher.keyIdOf((await backend.storedResponse(idOf(key)))!)).toBe('k1');
  });

  it('rotation: after a new active key, old records still replay and new ones use the new key', async () => {
    const oldKey = randomUUID();
    const { stored: first, app: after } = await storeThenRestart(oldKey, 'before-rotation', ringK1, rotated);
    const replay = await post(after, oldKey, 'before-rotation');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(first.body)).toBe(true);
    expect(after.counter.runs).toBe(0);

    const newKey = randomUUID();
    expect((await post(after, newKey, 'after-rotation')).status).toBe(201);
    expect(IdempotencyCipher.keyIdOf((await backend.storedResponse(idOf(oldKey)))!)).toBe('k1');
    expect(IdempotencyCipher.keyIdOf((await backend.storedResponse(idOf(newKey)))!)).toBe('k2');
  });

  it('a record sealed with a key that left the ring fails closed: 500, and the handler is not run again', async () => {
    const key = randomUUID();
    const { app: after } = await storeThenRestart(key, 'retired-key', ringK1, onlyK2);
    expectUnreadable(await post(after, key, 'retired-key'));
    expectUnreadable(await post(after, key, 'retired-key'));
    expect(after.counter.runs).toBe(0);
  });

  if (name !== 'memory') {
    it('a record whose ciphertext was altered in storage fails closed: 500, and the handler is not run again', async () => {
      const key = randomUUID();
      const { app: after } = await storeThenRestart(key, 'tampered', ringK1, ringK1);
      await backend.tamper!(idOf(key));
      expectUnreadable(await post(after, key, 'tampered'));
      expect(after.counter.runs).toBe(0);
    });
  }

  if (name === 'memory') {
    it('a sealed response copied to another record does not open there (AAD binds it to its record)', async () => {
      const app = await start(ringK1);
      const victim = randomUUID();
      const attacker = randomUUID();
      expect((await post(app, victim, 'victim-secret')).status).toBe(201);
      const store = backend.store();
      const record = (await store.get(idOf(victim)))!;
      expect(await store.restore(idOf(attacker), record)).toBe(true);

      expectUnreadable(await post(app, attacker, 'victim-secret'));
      expect(app.counter.runs).toBe(1);
    });

    it('a record stored in clear fails closed once encryption is on, unless acceptUnencrypted is set', async () => {
      const key = randomUUID();
      const { stored: first, app: strict } = await storeThenRestart(key, 'in-clear', undefined, ringK1);
      expectUnreadable(await post(strict, key, 'in-clear'));
      await strict.app.close();
      apps.splice(apps.indexOf(strict), 1);

      const rollout = await start({ ...ringK1, acceptUnencrypted: true });
      const replay = await post(rollout, key, 'in-clear');
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.equals(first.body)).toBe(true);
      expect(rollout.counter.runs).toBe(0);
    });

    it('an encrypted record fails closed when the app runs without encryption: the ciphertext is never sent', async () => {
      const key = randomUUID();
      const { app: plain } = await storeThenRestart(key, 'sealed', ringK1, undefined);
      expectUnreadable(await post(plain, key, 'sealed'));
      expect(plain.counter.runs).toBe(0);
    });

    it("staleLock: 'fail' stores its 500 idempotency-outcome-unknown sealed too, and replays it", async () => {
      const app = await start(ringK1);
      const service = app.app.get(IdempotencyService);
      const policy = resolvePolicy({ leaseMs: 200, heartbeatMs: 100, ttlMs: 60_000, staleLock: 'fail' });
      const scoped = buildScopedKey({ operation: 'security.stale', key: randomUUID() }, ['operation']);
      const request = { scoped, fingerprint: 'same-payload', policy };
      const first = await service.begin(request);
      if (first.kind !== 'claimed') throw new Error(`expected a claim, got ${first.kind}`);
      first.claim.stopHeartbeat(); // the process holding the claim froze
      await sleep(policy.leaseMs + 100);

      const recovered = await service.begin(request);
      expect(recovered.kind).toBe('outcome-unknown');
      const stored = await backend.stored([scoped.id]);
      expect(stored).toHaveLength(1);
      expect(holding(stored, 'outcome')).toEqual([]);
      const replayed = await service.begin(request);
      if (replayed.kind !== 'replay') throw new Error(`expected a replay, got ${replayed.kind}`);
      expect(replayed.response.statusCode).toBe(500);
      expect(JSON.parse(replayed.response.body!.toString('utf8')).code).toBe('idempotency_outcome_unknown');
    });

    it('run() values are sealed too, and replay decrypted', async () => {
      const app = await start(ringK1);
      const service = app.app.get(IdempotencyService);
      const key = randomUUID();
      const secret = `RUN-SECRET-${randomUUID()}`;
      const request = { operation: 'security.run', key, tenant: 't1' };
      expect(await service.run(request, () => ({ secret }))).toEqual({ status: 'fresh', value: { secret } });
      expect(await service.run(request, () => ({ secret: 'second run' }))).toEqual({
        status: 'replayed',
        value: { secret },
      });
      const id = buildScopedKey({ operation: 'security.run', tenant: 't1', key }, ['operation', 'tenant']).id;
      const stored = await backend.stored([id]);
      expect(stored[0].bytes.length).toBeGreaterThan(0);
      expect(holding(stored, secret)).toEqual([]);
    });
  }
});
