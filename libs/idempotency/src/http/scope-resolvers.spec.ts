import type { ExecutionContext } from '@nestjs/common';
import type { IdempotencyHttpRequest } from '../interfaces/idempotency-module-options.interface.js';
import { fromClientIp, fromHeader, fromUser } from './scope-resolvers.js';

const context = {} as ExecutionContext;
const requestWith = (fields: Partial<IdempotencyHttpRequest>): IdempotencyHttpRequest => ({
  method: 'POST',
  headers: {},
  ...fields,
});

describe('scope resolver helpers', () => {
  it('fromHeader() reads one trimmed value, whatever the case of the name', () => {
    const tenant = fromHeader('X-Tenant-ID');
    expect(tenant(requestWith({ headers: { 'x-tenant-id': ' acme ' } }), context)).toBe('acme');
    expect(tenant(requestWith({ headers: { 'x-tenant-id': ['acme', 'acme'] } }), context)).toBe('acme');
    expect(tenant(requestWith({ headers: { 'x-tenant-id': 'acme, acme' } }), context)).toBe('acme');
  });

  it('fromHeader() resolves nothing for a missing, empty or ambiguous header', () => {
    const tenant = fromHeader('x-tenant-id');
    for (const value of [undefined, '', '  ', [], ['a', 'b'], 'a, b']) {
      expect(tenant(requestWith({ headers: { 'x-tenant-id': value } }), context)).toBeUndefined();
    }
  });

  it('fromHeader() refuses what is not a header name', () => {
    expect(() => fromHeader('x tenant')).toThrow(TypeError);
    expect(() => fromHeader('')).toThrow(TypeError);
  });

  it('fromUser() reads a field or a dotted path of request.user, numbers as strings', () => {
    const user = { tenantId: 't-1', id: 42, org: { id: 'o-9' }, empty: '', nested: { x: 1 } };
    expect(fromUser('tenantId')(requestWith({ user }), context)).toBe('t-1');
    expect(fromUser('id')(requestWith({ user }), context)).toBe('42');
    expect(fromUser('org.id')(requestWith({ user }), context)).toBe('o-9');
    for (const path of ['empty', 'nested', 'missing', 'org.missing.deeper']) {
      expect(fromUser(path)(requestWith({ user }), context)).toBeUndefined();
    }
    expect(fromUser('id')(requestWith({}), context)).toBeUndefined();
    expect(() => fromUser('')).toThrow(TypeError);
  });

  it('fromClientIp() buckets by request.ip', () => {
    expect(fromClientIp()(requestWith({ ip: '203.0.113.7' }), context)).toBe('ip:203.0.113.7');
    expect(fromClientIp()(requestWith({}), context)).toBeUndefined();
  });
});
