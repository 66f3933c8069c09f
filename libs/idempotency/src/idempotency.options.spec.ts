import type { ExecutionContext } from '@nestjs/common';
import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import { resolveModuleSettings, resolvePolicy } from './idempotency.options.js';
import type { IdempotencyPolicyOptions } from './interfaces/idempotency-module-options.interface.js';
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

  it('unless set, the heartbeat follows the lease: a third of it', () => {
    expect(resolvePolicy({}).heartbeatMs).toBe(10_000);
    expect(resolvePolicy({ leaseMs: 15_000 }).heartbeatMs).toBe(5_000);
    expect(resolvePolicy({ leaseMs: 6_000 }, { leaseMs: 1_000 }).heartbeatMs).toBe(333);
    expect(resolvePolicy({ leaseMs: 2 }).heartbeatMs).toBe(1);
    // Set, it is kept as given (and checked against the lease).
    expect(resolvePolicy({ heartbeatMs: 2_000 }, { leaseMs: 15_000 }).heartbeatMs).toBe(2_000);
    expect(() => resolvePolicy({ heartbeatMs: 10_000 }, { leaseMs: 15_000 })).toThrow(/heartbeatMs \(10000\)/);
  });

  it('rejects a heartbeat longer than half the lease', () => {
    expect(() => resolvePolicy({ leaseMs: 1000, heartbeatMs: 600 })).toThrow(/heartbeatMs/);
    expect(() => resolvePolicy({ leaseMs: 1000, heartbeatMs: 500 })).not.toThrow();
  });

  it('an explicit undefined in a nested option keeps the default (no unbounded wait, no nameless header)', () => {
    const policy = resolvePolicy({
      inProgress: { mode: 'wait', maxWaitMs: undefined },
      replayHeader: { name: undefined },
    });
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

  it.each<[string, IdempotencyPolicyOptions, RegExp]>([
    [
      'a TTL above what the stores hold (100 years)',
      { ttlMs: 3_155_760_000_001 },
      /ttlMs must be at most 3155760000000/,
    ],
    ['a TTL that is not a safe integer', { ttlMs: 2 ** 60 }, /ttlMs must be a positive integer/],
    ['an infinite TTL', { ttlMs: Number.POSITIVE_INFINITY }, /ttlMs must be a positive integer/],
    ['a TTL given as text', { ttlMs: '86400000' as never }, /ttlMs must be a positive integer .*got "86400000"/],
    ['a fractional TTL', { ttlMs: 86_400_000.5 }, /ttlMs must be a positive integer/],
    ['a negative lease', { leaseMs: -30_000 }, /leaseMs must be a positive integer/],
    [
      'a lease longer than a JavaScript timer',
      { leaseMs: 2 ** 31, heartbeatMs: 10_000, ttlMs: 2 ** 33 },
      /leaseMs must be at most 2147483647/,
    ],
    [
      'a heartbeat as long as the lease',
      { leaseMs: 30_000, heartbeatMs: 30_000 },
      /heartbeatMs \(30000\) must be at most half of leaseMs/,
    ],
    ['a heartbeat longer than the lease', { leaseMs: 30_000, heartbeatMs: 60_000 }, /heartbeatMs/],
    ['a zero heartbeat', { heartbeatMs: 0 }, /heartbeatMs must be a positive integer/],
    ['a heartbeat that is not a number', { heartbeatMs: Number.NaN }, /heartbeatMs must be a positive integer/],
    ['a negative maxWaitMs', { inProgress: { mode: 'wait', maxWaitMs: -1 } }, /inProgress\.maxWaitMs/],
    ['a maxWaitMs no timer can wait', { inProgress: { mode: 'wait', maxWaitMs: 2 ** 31 } }, /inProgress\.maxWaitMs/],
    ['inProgress that is not an object', { inProgress: 'wait' as never }, /inProgress must be an object/],
    [
      'a zero maxStoredResponseBytes',
      { maxStoredResponseBytes: 0 },
      /maxStoredResponseBytes must be a positive integer/,
    ],
    ['a negative maxStoredResponseBytes', { maxStoredResponseBytes: -1 }, /maxStoredResponseBytes/],
    [
      'a zero maxFingerprintedBodyBytes',
      { maxFingerprintedBodyBytes: 0 },
      /maxFingerprintedBodyBytes must be a positive integer/,
    ],
    [
      "'fail-open' on a durable route",
      { durable: true, onStoreError: 'fail-open' },
      /onStoreError: 'fail-open' cannot be used with durable/,
    ],
    [
      "'fail-open' on a transactional route",
      { transactional: true, onStoreError: 'fail-open' },
      /onStoreError: 'fail-open' cannot be used with transactional/,
    ],
    [
      'transactional with durable: false',
      { transactional: true, durable: false },
      /transactional: true needs a durable record/,
    ],
    ['a boolean option given as text', { required: 'yes' as never }, /required must be true or false/],
    ['no methods', { methods: [] }, /methods must be a non-empty list/],
    ['a method that is not a token', { methods: ['PO ST'] }, /methods/],
    ['an unknown keySyntax', { keySyntax: 'strict' as never }, /keySyntax/],
    ['an unknown fingerprint.json mode', { fingerprint: { json: 'canonical' as never } }, /fingerprint\.json/],
    [
      'a fingerprint header that is not a header name',
      { fingerprint: { headers: ['x version'] } },
      /fingerprint\.headers/,
    ],
    ['a fingerprint given as text', { fingerprint: 'jcs' as never }, /fingerprint must be/],
    ['a keyPattern that is not a RegExp', { keyPattern: '^[a-f0-9]+$' as never }, /keyPattern must be a RegExp/],
    ['an unknown replayHeader.format', { replayHeader: { format: 'yes' as never } }, /replayHeader\.format/],
    ['a zero retryAfterSeconds', { inProgress: { retryAfterSeconds: 0 } }, /inProgress\.retryAfterSeconds/],
  ])('rejects %s, naming the option', (_case, options, message) => {
    expect(() => resolvePolicy(options)).toThrow(IdempotencyConfigurationError);
    expect(() => resolvePolicy(options)).toThrow(message);
  });

  it('checks the merged policy: a route option is judged with the module options it inherits', () => {
    expect(() => resolvePolicy({ durable: true }, { onStoreError: 'fail-open' })).toThrow(/fail-open/);
    expect(() => resolvePolicy({ onStoreError: 'fail-open' }, { transactional: true })).toThrow(/fail-open/);
    expect(() => resolvePolicy({ leaseMs: 60_000 }, { heartbeatMs: 40_000 })).toThrow(/heartbeatMs/);
    expect(() => resolvePolicy({ leaseMs: 100_000 }, { heartbeatMs: 40_000 })).not.toThrow();
    // A route that turns transactional on overrides the module's durable: false; one that says durable: false beside it does not.
    expect(resolvePolicy({ durable: false }, { transactional: true }).durable).toBe(true);
    expect(() => resolvePolicy({ transactional: true }, { durable: false })).toThrow(
      /transactional: true needs a durable record/,
    );
  });

  it('accepts the limits themselves', () => {
    expect(resolvePolicy({ ttlMs: 3_155_760_000_000 }).ttlMs).toBe(3_155_760_000_000);
    expect(
      resolvePolicy({ leaseMs: 2_147_483_647, heartbeatMs: 1_000_000_000, ttlMs: 2 * 2_147_483_647 }).leaseMs,
    ).toBe(2_147_483_647);
    expect(resolvePolicy({ inProgress: { mode: 'wait', maxWaitMs: 0 } }).inProgress.maxWaitMs).toBe(0);
    expect(resolvePolicy({ maxStoredResponseBytes: 1, maxFingerprintedBodyBytes: 1 }).maxStoredResponseBytes).toBe(1);
    expect(resolvePolicy({ durable: true, onStoreError: 'fail-closed' }).onStoreError).toBe('fail-closed');
    expect(resolvePolicy({ onStoreError: 'fail-open' }).onStoreError).toBe('fail-open');
  });

  it('isolationLevel: the route over the module, none by default, an unknown level refused at startup', () => {
    expect(resolvePolicy({}).isolationLevel).toBeUndefined();
    expect(resolvePolicy({ isolationLevel: 'REPEATABLE READ' }).isolationLevel).toBe('REPEATABLE READ');
    expect(
      resolvePolicy({ isolationLevel: 'REPEATABLE READ' }, { transactional: true, isolationLevel: 'SERIALIZABLE' })
        .isolationLevel,
    ).toBe('SERIALIZABLE');
    expect(() => resolvePolicy({ isolationLevel: 'SNAPSHOT' as never })).toThrow(/isolationLevel must be one of/);
  });

  it('lower-cases fingerprint header names once', () => {
    expect(resolvePolicy({ fingerprint: { headers: ['Api-Version'] } }).fingerprint).toEqual({
      json: 'lossless',
      headers: ['api-version'],
    });
  });
});

describe('resolveModuleSettings', () => {
  /** The default principal reads the request only. */
  const noContext = undefined as unknown as ExecutionContext;

  it('defaults the principal to request.user.id or sub, and the problem base to the example URI', async () => {
    const settings = resolveModuleSettings({});
    expect(await settings.principal({ headers: {}, method: 'POST', user: { id: 7 } }, noContext)).toBe('7');
    expect(await settings.principal({ headers: {}, method: 'POST', user: { sub: 'auth0|x' } }, noContext)).toBe(
      'auth0|x',
    );
    expect(await settings.principal({ headers: {}, method: 'POST' }, noContext)).toBeUndefined();
    expect(settings.tenant).toBeUndefined();
    expect(settings.problemTypeBaseUri).toBe('https://api.example.com/problems/');
  });

  it('adds the trailing slash to problemTypeBaseUri', () => {
    expect(resolveModuleSettings({ problemTypeBaseUri: 'https://x.test/p' }).problemTypeBaseUri).toBe(
      'https://x.test/p/',
    );
  });
});

describe('resolveModuleSettings: encryption', () => {
  it('builds the cipher once from the key ring, and none without one', () => {
    expect(resolveModuleSettings({}).cipher).toBeUndefined();
    const settings = resolveModuleSettings({
      encryption: { keys: [{ id: 'k1', key: Buffer.alloc(32, 7) }], activeKeyId: 'k1' },
    });
    expect(settings.cipher).toBeInstanceOf(IdempotencyCipher);
    expect(IdempotencyCipher.keyIdOf(settings.cipher!.seal('record', { statusCode: 200, headers: {} }))).toBe('k1');
  });

  it('fails at startup on a bad key ring', () => {
    expect(() =>
      resolveModuleSettings({ encryption: { keys: [{ id: 'k1', key: Buffer.alloc(31) }], activeKeyId: 'k1' } }),
    ).toThrow(IdempotencyConfigurationError);
  });
});
