import fc from 'fast-check';
import { createHash } from 'node:crypto';
import {
  buildScopedKey,
  derivedKey,
  IdempotencyScopeError,
  type ScopeDimension,
  type ScopeParts,
} from './scoped-key.js';

const ALL: readonly ScopeDimension[] = ['tenant', 'principal', 'operation'];
const parts: ScopeParts = { operation: 'POST /v1/transfers', tenant: 'acme', principal: 'user_1', key: 'k-123' };

describe('buildScopedKey', () => {
  it('B.3 rule 10: the id is 32 hex characters of SHA-256 over the versioned canonical string', () => {
    const scoped = buildScopedKey(parts, ALL);
    expect(scoped.id).toMatch(/^[0-9a-f]{32}$/);
    expect(scoped.id).toBe(createHash('sha256').update(scoped.scopeKey).digest('hex').slice(0, 32));
    expect(scoped.scopeKey).toBe(
      '["v1",["tenant","acme"],["principal","user_1"],["operation","POST /v1/transfers"],["key","k-123"]]',
    );
  });

  it('B.3 rule 10: is deterministic, and the id never contains the raw key', () => {
    const key = 'deadbeefdeadbeefdeadbeef';
    const scoped = buildScopedKey({ ...parts, key }, ALL);
    expect(buildScopedKey({ ...parts, key }, ALL)).toEqual(scoped);
    expect(scoped.id).not.toContain(key.slice(0, 8));
    expect(scoped.scopeKey).toContain(key);
  });

  it('B.3 rule 11: one key in two tenants, for two principals or on two operations names independent records', () => {
    const ids = new Set([
      buildScopedKey(parts, ALL).id,
      buildScopedKey({ ...parts, tenant: 'globex' }, ALL).id,
      buildScopedKey({ ...parts, principal: 'user_2' }, ALL).id,
      buildScopedKey({ ...parts, operation: 'POST /v1/payouts' }, ALL).id,
      buildScopedKey({ ...parts, key: 'k-124' }, ALL).id,
    ]);
    expect(ids.size).toBe(5);
  });

  it('B.3 rule 11: keys are compared exactly (case and spaces count)', () => {
    const ids = new Set(['k', 'K', ' k', 'k '].map((key) => buildScopedKey({ ...parts, key }, ALL).id));
    expect(ids.size).toBe(4);
  });

  it('B.3 rule 12: with scope ["tenant"], principal and operation are not part of the identity', () => {
    const tenantOnly = buildScopedKey(parts, ['tenant']);
    const other = { ...parts, principal: 'user_2', operation: 'POST /v1/payouts' };
    expect(buildScopedKey(other, ['tenant'])).toEqual(tenantOnly);
    expect(buildScopedKey({ ...parts, principal: undefined }, ['tenant'])).toEqual(tenantOnly);
    expect(buildScopedKey({ ...parts, tenant: 'globex' }, ['tenant']).id).not.toBe(tenantOnly.id);
    expect(tenantOnly.scopeKey).toBe('["v1",["tenant","acme"],["key","k-123"]]');
  });

  it('B.3 rule 10: the order of the scope list does not matter, duplicates neither', () => {
    expect(buildScopedKey(parts, ['operation', 'principal', 'tenant'])).toEqual(buildScopedKey(parts, ALL));
    expect(buildScopedKey(parts, ['tenant', 'tenant'])).toEqual(buildScopedKey(parts, ['tenant']));
  });

  it('B.3 rule 10: the encoding is injective: dimensions are named and values cannot imitate separators', () => {
    const tenantX = buildScopedKey({ ...parts, tenant: 'x' }, ['tenant']);
    const principalX = buildScopedKey({ ...parts, principal: 'x' }, ['principal']);
    expect(tenantX.id).not.toBe(principalX.id);
    const shifted = [
      buildScopedKey({ ...parts, tenant: 'a', key: 'b"],["key","c' }, ['tenant']),
      buildScopedKey({ ...parts, tenant: 'a"],["key","b', key: 'c' }, ['tenant']),
      buildScopedKey({ ...parts, tenant: 'a', key: 'bc' }, ['tenant']),
      buildScopedKey({ ...parts, tenant: 'ab', key: 'c' }, ['tenant']),
    ];
    expect(new Set(shifted.map((s) => s.id)).size).toBe(4);
    expect(new Set(shifted.map((s) => s.scopeKey)).size).toBe(4);
  });

  it('B.3 rule 13: an anonymous bucket never names the record of a tenant or principal with the same value', () => {
    const scope = ['tenant', 'principal', 'operation'] as const;
    const base = { operation: 'POST /orders', key: 'k-1' };
    const ids = [
      buildScopedKey({ ...base, tenant: 'x', principal: 'u' }, scope).id,
      buildScopedKey({ ...base, tenant: 'x', principal: 'u', anonymous: ['tenant'] }, scope).id,
      buildScopedKey({ ...base, tenant: 'anonymous:x', principal: 'u' }, scope).id,
      buildScopedKey({ ...base, tenant: 'x', principal: 'u', anonymous: ['principal'] }, scope).id,
      buildScopedKey({ ...base, tenant: 'x', principal: 'u', anonymous: ['tenant', 'principal'] }, scope).id,
    ];
    expect(new Set(ids).size).toBe(ids.length);
    // A dimension outside the scope is ignored, anonymous or not.
    expect(buildScopedKey({ ...base, tenant: 'x', anonymous: ['principal'] }, ['tenant']).id).toBe(
      buildScopedKey({ ...base, tenant: 'x' }, ['tenant']).id,
    );
  });

  it('B.3 rule 10: an empty scope is keyed by the key alone (an explicit, global choice)', () => {
    expect(buildScopedKey(parts, []).scopeKey).toBe('["v1",["key","k-123"]]');
  });

  it.each<[string, Partial<ScopeParts>, readonly ScopeDimension[]]>([
    ['tenant', { tenant: undefined }, ALL],
    ['tenant', { tenant: '' }, ['tenant']],
    ['principal', { principal: undefined }, ['principal']],
    ['operation', { operation: '' }, ['operation']],
    ['key', { key: '' }, ALL],
  ])('B.3 rule 13: an unresolved %s throws instead of using a shared namespace', (dimension, change, scope) => {
    const build = (): unknown => buildScopedKey({ ...parts, ...change }, scope);
    expect(build).toThrow(IdempotencyScopeError);
    expect(build).toThrow(expect.objectContaining({ name: 'IdempotencyScopeError', dimension }));
  });

  it('B.3 rule 13: an unknown scope dimension throws', () => {
    const scope = ['tenant', 'account'] as ScopeDimension[];
    expect(() => buildScopedKey(parts, scope)).toThrow(/Unknown idempotency scope dimension "account"/);
  });

  it('B.3 rule 13: the error message never contains the raw key', () => {
    try {
      buildScopedKey({ ...parts, key: 'secret-key-value', tenant: undefined }, ALL);
      throw new Error('expected a throw');
    } catch (error) {
      expect(error).toBeInstanceOf(IdempotencyScopeError);
      expect((error as Error).message).not.toContain('secret-key-value');
      expect((error as Error).message).toMatch(/configure a tenant resolver/);
    }
  });
});

describe('buildScopedKey properties', () => {
  // Values that imitate the encoding, the anonymous bucket, other dimensions and lone surrogates,
  // drawn often enough that equal and near-equal identities meet.
  const tricky = [
    'x',
    'anonymous:x',
    'anonymous-tenant',
    'tenant',
    'key',
    '"],["key","x',
    '\\',
    '"',
    ',',
    '\ud800',
    '\ufffd',
    'x ',
  ];
  const value = fc.oneof(
    fc.constantFrom(...tricky),
    fc.string({ minLength: 1, maxLength: 4 }),
    fc.string({ unit: 'binary', minLength: 1, maxLength: 3 }),
  );
  const request = fc.record({
    parts: fc.record({
      operation: value,
      tenant: value,
      principal: value,
      key: value,
      anonymous: fc.subarray(['tenant', 'principal'] as const),
    }),
    scope: fc.subarray(['tenant', 'principal', 'operation'] as const),
  });
  /** What must tell two records apart: each scoped dimension, whether it is an anonymous bucket, its value; and the key. */
  const identity = ({ parts, scope }: { parts: ScopeParts; scope: readonly ScopeDimension[] }) =>
    JSON.stringify([
      ...ALL.filter((d) => scope.includes(d)).map((d) => [
        d,
        d !== 'operation' && (parts.anonymous ?? []).includes(d),
        parts[d],
      ]),
      parts.key,
    ]);

  type Request = { parts: ScopeParts; scope: readonly ScopeDimension[] };
  /** Another request, or the same one changed a little: the scope reordered, one part redrawn, the anonymous flags redrawn. */
  const neighbour = (a: Request): fc.Arbitrary<Request> =>
    fc.oneof(
      request,
      fc.shuffledSubarray([...a.scope], { minLength: a.scope.length }).map((scope) => ({ ...a, scope })),
      fc
        .tuple(
          fc.constantFrom('operation', 'tenant', 'principal', 'key') as fc.Arbitrary<
            'operation' | 'tenant' | 'principal' | 'key'
          >,
          value,
        )
        .map(([name, v]) => ({ ...a, parts: { ...a.parts, [name]: v } })),
      fc.subarray(['tenant', 'principal'] as const).map((anonymous) => ({ ...a, parts: { ...a.parts, anonymous } })),
    );

  it('B.3 rules 10-13: distinct identities never share a scope key or an id; equal ones always do', () => {
    fc.assert(
      fc.property(
        request.chain((a) => fc.tuple(fc.constant(a), neighbour(a))),
        ([a, b]) => {
          const [x, y] = [buildScopedKey(a.parts, a.scope), buildScopedKey(b.parts, b.scope)];
          const same = identity(a) === identity(b);
          expect(x.scopeKey === y.scopeKey).toBe(same);
          expect(x.id === y.id).toBe(same);
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('B.3 rule 13: a tenant or principal value never names the record of an anonymous bucket, whatever it spells', () => {
    const prefix = fc.oneof(
      fc.constantFrom(
        '',
        'anonymous:',
        'anonymous-',
        'anonymous-tenant:',
        'anonymous-principal',
        '["anonymous-tenant",',
      ),
      fc.string({ maxLength: 4 }),
    );
    fc.assert(
      fc.property(request, prefix, prefix, (r, tenantPrefix, principalPrefix) => {
        const bucket = buildScopedKey({ ...r.parts, anonymous: ['tenant', 'principal'] }, r.scope);
        const spelled = {
          ...r.parts,
          tenant: tenantPrefix + r.parts.tenant,
          principal: principalPrefix + r.parts.principal,
          anonymous: [],
        };
        const hasPersonInScope = r.scope.includes('tenant') || r.scope.includes('principal');
        expect(buildScopedKey(spelled, r.scope).id === bucket.id).toBe(!hasPersonInScope);
      }),
      { numRuns: 2000 },
    );
  });

  it('the id is 32 lower-case hex characters, so the Redis Cluster hash tag <prefix>:{<id>} stays one slot', () => {
    fc.assert(
      fc.property(request, (r) => {
        expect(buildScopedKey(r.parts, r.scope).id).toMatch(/^[0-9a-f]{32}$/);
      }),
    );
  });
});

describe('derivedKey', () => {
  const scoped = buildScopedKey(parts, ALL);

  it('B.7 rule 17: is "idk_" + 43 base64url characters and stable across calls and processes', () => {
    const key = derivedKey(scoped, 'charge');
    expect(key).toMatch(/^idk_[A-Za-z0-9_-]{43}$/);
    expect(derivedKey(buildScopedKey({ ...parts }, ALL), 'charge')).toBe(key);
    const encoded = JSON.stringify(['v1-derived', scoped.scopeKey, 'charge']);
    const expected = createHash('sha256').update(encoded).digest('base64url');
    expect(key).toBe(`idk_${expected}`);
  });

  it('B.7 rule 17: different names, keys and scopes give different keys', () => {
    const keys = new Set([
      derivedKey(scoped, 'charge'),
      derivedKey(scoped, 'refund'),
      derivedKey(scoped, 'charge '),
      derivedKey(buildScopedKey({ ...parts, key: 'k-124' }, ALL), 'charge'),
      derivedKey(buildScopedKey({ ...parts, tenant: 'globex' }, ALL), 'charge'),
    ]);
    expect(keys.size).toBe(5);
  });

  it('B.7 rule 17: reveals neither the raw key nor the storage id', () => {
    const secret = buildScopedKey({ ...parts, key: 'raw-client-key-0001' }, ALL);
    const key = derivedKey(secret, 'charge');
    expect(key).not.toContain('raw-client-key');
    expect(key).not.toContain(secret.id);
    expect(Buffer.from(key.slice(4), 'base64url').toString('hex')).not.toContain(secret.id);
  });
});
