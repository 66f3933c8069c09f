import fc from 'fast-check';
import { parseIdempotencyKey, type KeyRules } from './idempotency-key.parser.js';

const compat: KeyRules = { keySyntax: 'compat', minKeyLength: 1, maxKeyLength: 255 };
const strict: KeyRules = { ...compat, keySyntax: 'sf-string' };

/** Printable ASCII (%x20-7E): what an RFC 9651 String may hold. */
const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
  minLength: 1,
  maxLength: 255,
});
/** What compat mode takes bare: %x21-7E except DQUOTE, backslash and comma. */
const rawChar = fc
  .integer({ min: 0x21, max: 0x7e })
  .filter((c) => c !== 0x22 && c !== 0x5c && c !== 0x2c)
  .map((c) => String.fromCharCode(c));
const rawKey = fc.string({ unit: rawChar, minLength: 1, maxLength: 255 });
const ows = fc.string({ unit: fc.constantFrom(' ', '\t'), maxLength: 3 });

/** The RFC 9651 serialization of a String. */
const quote = (key: string) => `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

describe('parseIdempotencyKey properties', () => {
  it('any printable string, sent as an sf-string (with or without parameters), reads back exactly in both modes', () => {
    fc.assert(
      fc.property(printable, fc.boolean(), (key, withParameters) => {
        const field = quote(key) + (withParameters ? ';v=1;x' : '');
        expect(parseIdempotencyKey(field, compat)).toEqual({ kind: 'valid', key });
        expect(parseIdempotencyKey(field, strict)).toEqual({ kind: 'valid', key });
      }),
    );
  });

  it('compat: a bare key and its quoted form name the same key; sf-string refuses the bare one', () => {
    fc.assert(
      fc.property(rawKey, (key) => {
        expect(parseIdempotencyKey(key, compat)).toEqual({ kind: 'valid', key });
        expect(parseIdempotencyKey(quote(key), compat)).toEqual({ kind: 'valid', key });
        expect(parseIdempotencyKey(key, strict)).toEqual({ kind: 'invalid', reason: 'syntax' });
      }),
    );
  });

  it('surrounding spaces and tabs never change the answer', () => {
    fc.assert(
      fc.property(fc.oneof(rawKey, printable.map(quote), fc.string()), ows, ows, (value, before, after) => {
        for (const rules of [compat, strict]) {
          const trimmed = value.replace(/^[ \t]+|[ \t]+$/g, '');
          expect(parseIdempotencyKey(`${before}${value}${after}`, rules)).toEqual(parseIdempotencyKey(trimmed, rules));
        }
      }),
    );
  });

  it('length bounds: too_long above the maximum, too_short below the minimum, valid in between', () => {
    fc.assert(
      fc.property(
        rawKey,
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 0, max: 300 }),
        (key, minKeyLength, extra) => {
          const rules: KeyRules = { keySyntax: 'compat', minKeyLength, maxKeyLength: minKeyLength + extra };
          const parsed = parseIdempotencyKey(key, rules);
          if (key.length > rules.maxKeyLength) expect(parsed).toEqual({ kind: 'invalid', reason: 'too_long' });
          else if (key.length < minKeyLength) expect(parsed).toEqual({ kind: 'invalid', reason: 'too_short' });
          else expect(parsed).toEqual({ kind: 'valid', key });
        },
      ),
    );
  });

  it('total: any field, any unicode, never throws; a valid key is 1 to 255 printable ASCII characters', () => {
    const field = fc.oneof(
      fc.string({ unit: 'binary' }),
      fc.string(),
      fc.array(fc.string({ unit: 'binary' }), { maxLength: 3 }),
      fc.constant(undefined),
    );
    fc.assert(
      fc.property(field, fc.constantFrom(compat, strict), (value, rules) => {
        const parsed = parseIdempotencyKey(value, rules);
        if (parsed.kind === 'missing')
          expect(value === undefined || (Array.isArray(value) && value.length === 0)).toBe(true);
        if (parsed.kind === 'valid') {
          expect(parsed.key.length).toBeGreaterThanOrEqual(1);
          expect(parsed.key.length).toBeLessThanOrEqual(255);
          expect(parsed.key).toMatch(/^[\x20-\x7e]+$/);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('several field lines never yield a key: a key sent twice is a syntax error, not a silent pick', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(rawKey, printable.map(quote)), { minLength: 2, maxLength: 4 }),
        fc.constantFrom(compat, strict),
        (lines, rules) => {
          expect(parseIdempotencyKey(lines, rules).kind).toBe('invalid');
        },
      ),
    );
  });
});
