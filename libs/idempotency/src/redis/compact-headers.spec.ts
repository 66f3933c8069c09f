import { decodeCompactHeaders, encodeCompactHeaders } from './compact-headers.js';

const EXPRESS_HEADERS = {
  'x-powered-by': 'Express',
  location: '/orders/5f0c6f7e-8a51-4a4f-9a3e-2b7d2c8e1f00',
  'content-type': 'application/json; charset=utf-8',
  etag: 'W/"136-hRHsEgdu8AZgWfBbyzCrl0WVcdk"',
};

describe('compact headers (Redis record, flag 16)', () => {
  it('round-trips typical Express headers in about half the bytes of their JSON', () => {
    const bytes = encodeCompactHeaders(EXPRESS_HEADERS)!;
    expect(bytes.length).toBeLessThanOrEqual(JSON.stringify(EXPRESS_HEADERS).length * 0.55);
    expect(decodeCompactHeaders(bytes)).toEqual(EXPRESS_HEADERS);
  });

  it('keeps unknown names, non-ASCII values, empty strings, arrays of one and many, in order', () => {
    const headers = {
      'x-custom-ünï': 'reçu ✓',
      'content-disposition': 'attachment; filename="a.pdf"',
      vary: ['Origin'],
      link: ['</a>; rel="next"', '</b>; rel="prev"', ''],
      'x-empty': '',
    };
    Object.defineProperty(headers, '__proto__', { value: 'a header name like any other', enumerable: true });
    const decoded = decodeCompactHeaders(encodeCompactHeaders(headers)!);
    expect(decoded).toEqual(headers);
    expect(Object.keys(decoded)).toEqual(Object.keys(headers));
    expect(Object.getPrototypeOf(decoded)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(decoded, '__proto__')?.value).toBe('a header name like any other');
  });

  it('round-trips no headers as no bytes', () => {
    expect(encodeCompactHeaders({})!.length).toBe(0);
    expect(decodeCompactHeaders(Buffer.alloc(0))).toEqual({});
  });

  it('declines what the form cannot hold: an empty array, a name over 255 bytes, a value over 65,535', () => {
    expect(encodeCompactHeaders({ vary: [] })).toBeUndefined();
    expect(encodeCompactHeaders({ ['x-' + 'n'.repeat(254)]: 'v' })).toBeUndefined();
    expect(encodeCompactHeaders({ 'x-big': 'v'.repeat(65_536) })).toBeUndefined();
    expect(encodeCompactHeaders({ ['x-' + 'n'.repeat(253)]: 'v'.repeat(65_535) })).toBeDefined();
  });

  it('refuses bytes it did not write: truncated entries, unknown codes, a name given twice', () => {
    const bytes = encodeCompactHeaders(EXPRESS_HEADERS)!;
    for (let end = 1; end < bytes.length; end++) {
      const prefix = bytes.subarray(0, end);
      let decoded: unknown;
      try {
        decoded = decodeCompactHeaders(prefix);
      } catch (error) {
        expect(error).toBeInstanceOf(RangeError);
        continue;
      }
      // A cut between two entries is a shorter, valid list: never one with a partial value.
      expect(
        Object.entries(decoded as object).every(
          ([name, value]) => EXPRESS_HEADERS[name as keyof typeof EXPRESS_HEADERS] === value,
        ),
      ).toBe(true);
    }
    expect(() => decodeCompactHeaders(Buffer.from([0x7f, 1]))).toThrow(RangeError);
    expect(() => decodeCompactHeaders(Buffer.from([1, 0xff]))).toThrow(RangeError);
    expect(() => decodeCompactHeaders(Buffer.from([1, 1, 1, 2]))).toThrow(/twice/);
    expect(() => decodeCompactHeaders(Buffer.from([1, 1, 0x81, 2]))).toThrow(/twice/);
  });
});
