import { Test, type TestingModule } from '@nestjs/testing';
import { DataSource } from 'typeorm';
import {
  IdempotencyModule,
  IdempotencyService,
  IdempotencyScopeError,
  MemoryIdempotencyStore,
  type IdempotencyModuleOptions,
} from 'nestjs-idempotency';
import { buildScopedKey } from '../src/engine/scoped-key.js';
import { resolvePolicy } from '../src/idempotency.options.js';
import { IdempotencyAdmin } from 'nestjs-idempotency/admin';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import {
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  TypeOrmIdempotencyStore,
  idempotencyTypeOrmEntities,
} from 'nestjs-idempotency/typeorm';
import { freePort } from '../../../test/support/net/free-port.js';
import { RecordingLogger } from '../../../test/support/recording-logger.js';

/**
 * `IdempotencyAdmin` over the memory fast tier and the TypeORM durable tier on sql.js: the
 * storage id computed as the engine computes it, both tiers' views, in-progress listing, an
 * audited force-release that fences the running owner, and tiers that are unreachable or absent.
 */
describe('IdempotencyAdmin', () => {
  const SCOPE = ['tenant', 'operation'] as const;
  let dataSource: DataSource;
  const modules: TestingModule[] = [];
  const logger = new RecordingLogger();

  beforeAll(async () => {
    dataSource = new DataSource({
      type: 'sqljs',
      entities: idempotencyTypeOrmEntities('sqljs'),
      migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
      logging: false,
    });
    await dataSource.initialize();
    await dataSource.runMigrations();
  });
  afterAll(async () => {
    await Promise.all(modules.map((m) => m.close()));
    await dataSource.destroy();
  });

  const boot = async (options: IdempotencyModuleOptions) => {
    const moduleRef = await Test.createTestingModule({ imports: [IdempotencyModule.forRoot(options)] }).compile();
    moduleRef.useLogger(logger);
    await moduleRef.init();
    modules.push(moduleRef);
    return { admin: moduleRef.get(IdempotencyAdmin), engine: moduleRef.get(IdempotencyService) };
  };
  const bothTiers = () =>
    boot({
      store: new MemoryIdempotencyStore(),
      durableStore: new TypeOrmIdempotencyStore(dataSource),
      scope: [...SCOPE],
    });
  /** A durable claim held by the engine, as a request whose handler still runs. */
  const runningClaim = async (engine: IdempotencyService, tenant: string, key: string) => {
    const scoped = buildScopedKey({ operation: 'charges.create', tenant, key }, SCOPE);
    const policy = resolvePolicy({ scope: [...SCOPE] }, { durable: true });
    const begun = await engine.begin({ scoped, fingerprint: 'fp', policy });
    if (begun.kind !== 'claimed') throw new Error(`expected a claim, got ${begun.kind}`);
    return begun.claim;
  };

  it('computes the storage id as the engine does (module scope by default, or the given one) and checks keyIds', async () => {
    const { admin } = await bothTiers();
    const parts = { operation: 'charges.create', tenant: 't1', principal: 'u1', key: 'k-1' };
    expect(admin.keyIdOf(parts)).toBe(buildScopedKey(parts, SCOPE).id);
    expect(admin.keyIdOf({ ...parts, scope: ['operation'] })).toBe(buildScopedKey(parts, ['operation']).id);
    expect(() => admin.keyIdOf({ operation: 'charges.create', key: 'k-1' })).toThrow(IdempotencyScopeError);
    expect(() => admin.keyIdOf({ keyId: 'not-an-id' })).toThrow(RangeError);
    expect(admin.parseKeyField('"k-1"')).toEqual({ kind: 'valid', key: 'k-1' });
    expect(admin.parseKeyField('a b')).toMatchObject({ kind: 'invalid' });
  });

  it('shows a running claim in both tiers, lists it, and force-releases it: audited, and the owner fenced', async () => {
    const { admin, engine } = await bothTiers();
    const claim = await runningClaim(engine, 't-run', 'key-secret-123');
    const ref = { operation: 'charges.create', tenant: 't-run', key: 'key-secret-123' };
    const looked = await admin.lookup(ref);
    expect(looked.keyId).toBe(claim.scoped.id);
    for (const tier of [looked.fast, looked.durable]) {
      expect(tier).toMatchObject({
        status: 'found',
        record: { state: 'in_progress', ownerToken: claim.ownerToken, fencingToken: 1, leaseLapsed: false },
      });
    }
    const listed = await admin.listInProgress({ olderThanMs: 0 });
    for (const tier of [listed.fast, listed.durable]) {
      expect(tier.status === 'listed' && tier.records.map((r) => r.keyId)).toContain(claim.scoped.id);
    }

    await expect(admin.forceRelease(ref, { actor: ' ', reason: 'x' })).rejects.toThrow(TypeError);
    await expect(admin.forceRelease(ref, { actor: 'bob', reason: '' })).rejects.toThrow(TypeError);
    expect(await admin.forceRelease(ref, { actor: 'bob', reason: 'stuck "worker"\nINC-7' })).toEqual({
      keyId: claim.scoped.id,
      fast: 'released',
      durable: 'released',
    });
    const audit = logger.entries.filter(
      (e) => e.level === 'warn' && e.text.includes(`force-release key=${claim.scoped.id}`),
    );
    expect(audit).toHaveLength(1);
    expect(audit[0].text).toContain('actor="bob" reason="stuck \\"worker\\"\\nINC-7"');
    expect(audit[0].text).not.toContain('key-secret-123');
    expect(await engine.finish(claim, { statusCode: 200, headers: {}, body: Buffer.from('late') })).toBe('lost');
    expect(await admin.lookup(ref)).toMatchObject({ fast: { status: 'absent' }, durable: { status: 'absent' } });
  });

  it('keeps a completed record unless includeCompleted, and shows its body only when asked', async () => {
    const { admin, engine } = await bothTiers();
    const claim = await runningClaim(engine, 't-done', 'k');
    expect(
      await engine.finish(claim, { statusCode: 201, headers: { location: '/x' }, body: Buffer.from('{"id":1}') }),
    ).toBe('stored');
    const ref = { keyId: claim.scoped.id };
    const plain = await admin.lookup(ref);
    expect(plain.durable).toMatchObject({
      status: 'found',
      record: { state: 'completed', response: { statusCode: 201, bodyBytes: 8, headers: { location: '/x' } } },
    });
    expect(plain.durable.status === 'found' && plain.durable.record.response).not.toHaveProperty('bodyBase64');
    const withBody = await admin.lookup(ref, { includeBody: true });
    expect(withBody.fast.status === 'found' && withBody.fast.record.response?.bodyBase64).toBe(
      Buffer.from('{"id":1}').toString('base64'),
    );
    expect(await admin.forceRelease(ref, { actor: 'bob', reason: 'keep' })).toMatchObject({
      fast: 'not-found',
      durable: 'not-found',
    });
    expect(
      await admin.forceRelease(ref, { actor: 'bob', reason: 'wrong answer', includeCompleted: true }),
    ).toMatchObject({
      fast: 'released',
      durable: 'released',
    });
  });

  it('reports an unreachable fast tier per call instead of failing, and a module without a durable tier', async () => {
    const port = await freePort();
    const unreachable = new RedisIdempotencyStore(`redis://127.0.0.1:${port}`, { prefix: 'admin-down' });
    const { admin } = await boot({ store: unreachable, scope: [...SCOPE] });
    const ref = { keyId: 'a'.repeat(32) };
    const looked = await admin.lookup(ref);
    expect(looked).toMatchObject({
      fast: { status: 'unavailable', error: expect.stringContaining('Redis idempotency store') },
      durable: { status: 'not-configured' },
    });
    expect(await admin.listInProgress({ olderThanMs: 0 })).toMatchObject({
      fast: { status: 'unavailable' },
      durable: { status: 'not-configured' },
    });
    const released = await admin.forceRelease(ref, { actor: 'bob', reason: 'try' });
    expect(released).toMatchObject({ fast: { error: expect.any(String) }, durable: 'not-configured' });
    await expect(admin.listInProgress({ olderThanMs: -5 })).rejects.toThrow(RangeError);
  });
});
