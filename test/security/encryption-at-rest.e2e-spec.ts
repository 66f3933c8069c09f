import { randomBytes, randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import {
  IdempotencyCipher,
  IdempotencyService,
  MemoryIdempotencyStore,
  buildScopedKey,
  type IdempotencyEncryptionOptions,
  type IdempotencyStore,
  type StoredResponse,
} from '@app/idempotency';
import { RedisIdempotencyStore } from '@app/idempotency/redis';
import { TypeOrmIdempotencyStore } from '@app/idempotency/typeorm';
import { securityRecordId, startSecurityApp, type SecurityApp } from '../fixtures/security.app.js';
import { send, type HttpResult } from '../utils/http.js';
import { openIdempotencyDataSource } from '../utils/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../utils/postgres.js';
import { deleteKeys, openRedis, redisUrl } from '../utils/redis.js';
import { holding, postgresStoredBytes, recordBytes, redisStoredBytes, type StoredBytes } from './support/stored-bytes.js';

const k1 = { id: 'k1', key: randomBytes(32) };
const k2 = { id: 'k2', key: randomBytes(32) };
const ringK1: IdempotencyEncryptionOptions = { keys: [k1], activeKeyId: 'k1' };
const rotated: IdempotencyEncryptionOptions = { keys: [k1, k2], activeKeyId: 'k2' };
const onlyK2: IdempotencyEncryptionOptions = { keys: [k2], activeKeyId: 'k2' };

/** One backend under test: where records live, how to read their raw bytes and how to damage one. */
interface Backend {
  route: string;
  operation: string;
  /** The fast store for a (re)started app; the records it sees survive restarts, except the memory fast tier in front of PostgreSQL. */
  store(): IdempotencyStore;
  durableStore?: TypeOrmIdempotencyStore;
  /** Everything stored for the records with these ids, as raw bytes. */
  stored(ids: string[]): Promise<StoredBytes[]>;
  /** The stored (sealed) response of one record. */
  storedResponse(id: string): Promise<StoredResponse | undefined>;
  /** Flips one byte of the stored ciphertext in place, or undefined when the backend cannot be written raw. */
  tamper?(id: string): Promise<void>;
}

function flipLastByte(bytes: Buffer): Buffer {
  const copy = Buffer.from(bytes);
  copy[copy.length - 1] ^= 0x01;
  return copy;
}

function expectUnreadable(res: HttpResult): void {
  expect(res.status).toBe(500);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(res.json()).toMatchObject({ status: 500, code: 'idempotency_record_unreadable' });
  expect(res.headers.get('idempotent-replayed')).toBeNull();
}

function memoryBackend(): Backend {
  const store = new MemoryIdempotencyStore();
  return {
    route: '/secrets',
    operation: 'secrets.create',
    store: () => store,
    stored: async (ids) => Promise.all(ids.map(async (id) => recordBytes(id, await store.get(id)))),
    storedResponse: async (id) => (await store.get(id))?.response,
  };
}

function redisBackend(client: Redis, prefix: string): Backend {
  const store = () => new RedisIdempotencyStore(redisUrl(), { prefix });
  const inspector = new RedisIdempotencyStore(client, { prefix });
  return {
    route: '/secrets',
    operation: 'secrets.create',
    store,
    stored: () => redisStoredBytes(client, prefix),
    storedResponse: async (id) => (await inspector.get(id))?.response,
    tamper: async (id) => {
      const key = `${prefix}:{${id}}`;
      await client.set(key, flipLastByte((await client.getBuffer(key))!), 'KEEPTTL');
    },
  };
}

function postgresBackend(dataSource: DataSource): Backend {
  const durableStore = new TypeOrmIdempotencyStore(dataSource);
  return {
    route: '/secrets/durable',
    operation: 'secrets.durable',
    // A fresh fast tier on each start: a restarted app reads the durable row.
    store: () => new MemoryIdempotencyStore(),
    durableStore,
    stored: () => postgresStoredBytes(dataSource),
    storedResponse: async (id) => (await durableStore.get(id))?.response,
    tamper: async (id) => {
      const [row] = await dataSource.query('SELECT response_body FROM idempotency_records WHERE key = $1', [id]);
      await dataSource.query('UPDATE idempotency_records SET response_body = $2 WHERE key = $1', [id, flipLastByte(row.response_body)]);
    },
  };
}

describe.each(['memory', 'redis', 'postgres'] as const)('encryption at rest on the %s backend', (name) => {
  let backend: Backend;
  let redis: Redis | undefined;
  let dataSource: DataSource | undefined;
  let schema: string | undefined;
  const prefix = `idem-sec-enc-${randomUUID().slice(0, 8)}`;
  const apps: SecurityApp[] = [];

  const start = async (encryption?: IdempotencyEncryptionOptions): Promise<SecurityApp> => {
    const app = await startSecurityApp(backend.store(), { encryption, durableStore: backend.durableStore });
    apps.push(app);
    return app;
  };
  const post = (app: SecurityApp, key: string, secret: string) =>
    send(app.url, backend.route, { key, body: { secret }, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });
  const idOf = (key: string) => securityRecordId(backend.operation, key);
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
    if (name === 'memory') backend = memoryBackend();
    if (name === 'redis') backend = redisBackend((redis = await openRedis()), prefix);
    if (name === 'postgres') {
      await (await connectPostgresOrFail()).end();
      schema = await createThrowawaySchema('sec_enc');
      dataSource = await openIdempotencyDataSource(schema);
      backend = postgresBackend(dataSource);
    }
  });
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.app.close();
  });
  afterAll(async () => {
    if (redis) {
      await deleteKeys(redis, `${prefix}:`);
      await redis.quit();
    }
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
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

    it('run() values are sealed too, and replay decrypted', async () => {
      const app = await start(ringK1);
      const service = app.app.get(IdempotencyService);
      const key = randomUUID();
      const secret = `RUN-SECRET-${randomUUID()}`;
      const request = { operation: 'security.run', key, tenant: 't1' };
      expect(await service.run(request, () => ({ secret }))).toEqual({ status: 'fresh', value: { secret } });
      expect(await service.run(request, () => ({ secret: 'second run' }))).toEqual({ status: 'replayed', value: { secret } });
      const id = buildScopedKey({ operation: 'security.run', tenant: 't1', key }, ['operation', 'tenant']).id;
      const stored = await backend.stored([id]);
      expect(stored[0].bytes.length).toBeGreaterThan(0);
      expect(holding(stored, secret)).toEqual([]);
    });
  }
});
