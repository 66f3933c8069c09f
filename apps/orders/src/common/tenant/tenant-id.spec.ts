import { parseTenantId } from './tenant-id.js';

describe('parseTenantId', () => {
  it('accepts a UUID and stores it in lower case', () => {
    expect(parseTenantId('3F2504E0-4F89-41D3-9A0C-0305E82C3301')).toEqual({
      kind: 'ok',
      tenantId: '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
    });
    expect(parseTenantId(' 3f2504e0-4f89-41d3-9a0c-0305e82c3301 ')).toEqual({
      kind: 'ok',
      tenantId: '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
    });
  });

  it('reports a missing or empty header as missing', () => {
    expect(parseTenantId(undefined)).toEqual({ kind: 'missing' });
    expect(parseTenantId('')).toEqual({ kind: 'missing' });
    expect(parseTenantId('   ')).toEqual({ kind: 'missing' });
  });

  it.each([
    ['not-a-uuid'],
    ['3f2504e0-4f89-41d3-9a0c-0305e82c330'],
    ['3f2504e04f8941d39a0c0305e82c3301'],
    ['3f2504e0-4f89-41d3-9a0c-0305e82c3301, 3f2504e0-4f89-41d3-9a0c-0305e82c3302'],
  ])('reports %s as invalid', (header) => {
    expect(parseTenantId(header)).toEqual({ kind: 'invalid' });
  });

  it('reports repeated headers as invalid', () => {
    expect(parseTenantId(['3f2504e0-4f89-41d3-9a0c-0305e82c3301', '3f2504e0-4f89-41d3-9a0c-0305e82c3301'])).toEqual({
      kind: 'invalid',
    });
  });
});
