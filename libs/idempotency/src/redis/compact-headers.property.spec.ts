import fc from 'fast-check';
import { decodeCompactHeaders, encodeCompactHeaders } from './compact-headers.js';

type Headers = Record<string, string | string[]>;

/** Names and values from the form's tables, next to anything else a store may be given. */
const TABLE_NAMES = ['content-type', 'location', 'etag', 'vary', 'pragma'];
const TABLE_VALUES = ['application/json; charset=utf-8', 'Express', 'no-store', 'en'];

const name = fc.oneof(
  fc.constantFrom(...TABLE_NAMES),
  fc.string({ maxLength: 12 }),
  // Any UTF-16 code unit: lone surrogates, NUL, non-ASCII.
  fc.string({ unit: 'binary', maxLength: 12 }),
  fc.string({ minLength: 250, maxLength: 260 }),
);
const element = fc.oneof(
  fc.constantFrom(...TABLE_VALUES),
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
);
const value = fc.oneof(element, fc.array(element, { maxLength: 4 }));
const headers = fc.dictionary(name, value, { maxKeys: 8 }) as fc.Arbitrary<Headers>;

const wellFormed = (text: string) => !/\p{Cs}/u.test(text);
const utf8 = (text: string) => Buffer.byteLength(text, 'utf8');

/** What the compact form may decline (then the record keeps its JSON headers): nothing else. */
function mayDecline(input: Headers): boolean {
  return Object.entries(input).some(([key, entry]) => {
    const elements = Array.isArray(entry) ? entry : [entry];
    return (
      elements.length === 0 ||
      utf8(key) > 255 ||
      !wellFormed(key) ||
      elements.some((text) => utf8(text) > 65_535 || !wellFormed(text))
    );
  });
}

describe('compact headers (Redis record, flag 16), property', () => {
  it('decodes to exactly the headers encoded (names, values, arrays, order), or declines them', () => {
    fc.assert(
      fc.property(headers, (input) => {
        const bytes = encodeCompactHeaders(input);
        if (bytes === undefined) {
          expect(mayDecline(input)).toBe(true);
          return;
        }
        const decoded = decodeCompactHeaders(bytes);
        expect(decoded).toStrictEqual({ ...input });
        expect(Object.keys(decoded)).toEqual(Object.keys(input));
      }),
      { numRuns: 2_000 },
    );
  });

  it('keeps an empty header name and the value after it (a shape the store accepts)', () => {
    const inputs: Headers[] = [{ '': 'v' }, { '': 'Express' }, { '': ['a', 'b'], etag: 'x' }];
    for (const input of inputs) {
      expect(decodeCompactHeaders(encodeCompactHeaders(input)!)).toStrictEqual(input);
    }
  });

  it('declines a lone surrogate (UTF-8 cannot hold it; the JSON form keeps it)', () => {
    expect(encodeCompactHeaders({ 'x-a': 'broken \ud800' })).toBeUndefined();
    expect(encodeCompactHeaders({ 'x-\udc00': 'v' })).toBeUndefined();
    const paired = { 'x-emoji': 'ok 😀' };
    expect(decodeCompactHeaders(encodeCompactHeaders(paired)!)).toStrictEqual(paired);
  });
});
