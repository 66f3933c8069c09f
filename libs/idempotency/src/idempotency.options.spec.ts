import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import { resolveModuleSettings, resolvePolicy } from './idempotency.options.js';
import { IdempotencyCipher } from './security/idempotency-cipher.js';

describe('resolvePolicy', () => {
  it('applies the docs/contract.md B.12 defaults', () => {
    const policy = resolvePolicy({});
    expect(policy).toMatchObject({
      methods: ['POST', 'PATCH'],
      required: false,
      keySyntax: 'compat',
      maxKeyLength: 255,
      minKeyLength: 1,
      scope: ['tenant', 'principal', 'operation'],
      mismatchStatus: 422,
      inProgress: { mode: 'reject', maxWaitMs: 5000, maxRetryAfterSeconds: 5 },
      storeServerErrors: false,
      storeClientErrors: true,
      ttlMs: 86_400_000,
      leaseMs: 30_000,
      heartbeatMs: 10_000,
      staleLock: 'takeover',
      replayHeader: { name: 'Idempotent-Replayed', onFresh: false, format: 'boolean' },
      echoKey: true,
      maxStoredResponseBytes: 1_048_576,
      maxFingerprintedBodyBytes: 1_048_576,
      onStoreError: 'fail-closed',
    });
    expect(policy.fingerprint).toEqual({ json: 'lossless', headers: [] });
  });

  it('a route overrides the module field by field, nested objects merged', () => {
    const policy = resolvePolicy(
      { required: true, inProgress: { mode: 'wait', maxWaitMs: 2000 }, ttlMs: 3_600_000 },
      { inProgress: { maxWaitMs: 500 }, operation: 'orders.create' },
    );
    expect(policy.required).toBe(true);
    expect(policy.inProgress).toMatchObject({ mode: 'wait', maxWaitMs: 500 });
    expect(policy.ttlMs).toBe(3_600_000);
    expect(policy.operation).toBe('orders.create');
  });

  it('B.9 rule 29: rejects ttlMs < 2 × leaseMs', () => {
    expect(() => resolvePolicy({ ttlMs: 50_000, leaseMs: 30_000 })).toThrow(IdempotencyConfigurationError);
    expect(() => resolvePolicy({ ttlMs: 60_000, leaseMs: 30_000 })).not.toThrow();
  });

  it('rejects a heartbeat longer than half the lease', () => {
    expect(() => resolvePolicy({ leaseMs: 1000, heartbeatMs: 600 })).toThrow(/heartbeatMs/);
    expect(() => resolvePolicy({ leaseMs: 1000, heartbeatMs: 500 })).not.toThrow();
  });

  it('an explicit undefined in a nested option keeps the default (no unbounded wait, no nameless header)', () => {
    const policy = resolvePolicy({ inProgress: { mode: 'wait', maxWaitMs: undefined }, replayHeader: { name: undefined } });
    expect(policy.inProgress.maxWaitMs).toBe(5000);
    expect(policy.replayHeader.name).toBe('Idempotent-Replayed');
  });

  it.each([
    [{ scope: [] }, /scope/],
    [{ mismatchStatus: 418 as never }, /mismatchStatus/],
    [{ minKeyLength: 0 }, /minKeyLength/],
    [{ maxKeyLength: 0 }, /maxKeyLength/],
    [{ replayHeader: { name: 'bad name' } }, /replayHeader/],
    [{ staleLock: 'ignore' as never }, /staleLock/],
    [{ onStoreError: 'retry' as never }, /onStoreError/],
    [{ leaseMs: 1500.5, heartbeatMs: 500 }, /leaseMs/],
    [{ inProgress: { maxWaitMs: -1 } }, /maxWaitMs/],
    [{ inProgress: { maxWaitMs: Number.NaN } }, /maxWaitMs/],
    [{ maxFingerprintedBodyBytes: -1 }, /maxFingerprintedBodyBytes/],
  ])('rejects an invalid option %j', (options, message) => {
    expect(() => resolvePolicy(options)).toThrow(message);
  });

  it('lower-cases fingerprint header names once', () => {
    expect(resolvePolicy({ fingerprint: { headers: ['Api-Version'] } }).fingerprint).toEqual({
      json: 'lossless',
      headers: ['api-version'],
    });
  });
});

describe('resolveModuleSettings', () => {
  it('defaults the principal to request.user.id or sub, and the problem base to the example URI', async () => {
    const settings = resolveModuleSettings({});
    expect(await settings.principal({ headers: {}, method: 'POST', user: { id: 7 } })).toBe('7');
    expect(await settings.principal({ headers: {}, method: 'POST', user: { sub: 'auth0|x' } })).toBe('auth0|x');
    expect(await settings.principal({ headers: {}, method: 'POST' })).toBeUndefined();
    expect(settings.tenant).toBeUndefined();
    expect(settings.problemTypeBaseUri).toBe('https://api.example.com/problems/');
  });

  it('adds the trailing slash to problemTypeBaseUri', () => {
    expect(resolveModuleSettings({ problemTypeBaseUri: 'https://x.test/p' }).problemTypeBaseUri).toBe('https://x.test/p/');
  });
});

describe('resolveModuleSettings: encryption', () => {
  it('builds the cipher once from the key ring, and none without one', () => {
    expect(resolveModuleSettings({}).cipher).toBeUndefined();
    const settings = resolveModuleSettings({ encryption: { keys: [{ id: 'k1', key: Buffer.alloc(32, 7) }], activeKeyId: 'k1' } });
    expect(settings.cipher).toBeInstanceOf(IdempotencyCipher);
    expect(IdempotencyCipher.keyIdOf(settings.cipher!.seal('record', { statusCode: 200, headers: {} }))).toBe('k1');
  });

  it('fails at startup on a bad key ring', () => {
    expect(() => resolveModuleSettings({ encryption: { keys: [{ id: 'k1', key: Buffer.alloc(31) }], activeKeyId: 'k1' } })).toThrow(
      IdempotencyConfigurationError,
    );
  });
});
