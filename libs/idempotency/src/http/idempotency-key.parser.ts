/**
 * Reads the `Idempotency-Key` request header (docs/contract.md B.2): a key, its absence, or the
 * precise reason it is refused.
 */
import { parseStringItem } from './structured-string-item.js';

/**
 * How the `Idempotency-Key` field value is read (docs/contract.md B.2 rule 5).
 *
 * - `compat` (default): a quoted RFC 9651 String, or else the bare value as sent. Stripe-,
 *   Adyen- and Telnyx-style clients send bare tokens while the IETF draft and Firefox send
 *   quoted strings, so `"abc"` and `abc` name the same key.
 * - `sf-string`: only an RFC 9651 Item whose bare item is a String, as the draft requires.
 *
 * @publicApi
 */
export type KeySyntax = 'compat' | 'sf-string';

/**
 * The constraints a received key must meet (docs/contract.md B.2 rules 5 and 6).
 */
export interface KeyRules {
  /** Accepted field syntax. */
  keySyntax: KeySyntax;
  /** Minimum key length in characters, after unescaping. */
  minKeyLength: number;
  /** Maximum key length in characters, after unescaping (Stripe's 255 by default). */
  maxKeyLength: number;
  /**
   * Extra format the key must match, tested with `RegExp.prototype.test` on the unescaped key.
   * Anchor it (`^...$`): an unanchored pattern matches any key that merely contains a match.
   */
  keyPattern?: RegExp;
}

/**
 * Why a key is rejected; it becomes the `reason` member of the `idempotency-key-invalid`
 * problem (docs/contract.md B.11), so clients can tell a format error from a length error.
 *
 * - `syntax`: the value is malformed: not an RFC 9651 String Item, and (in `compat` mode) not
 *   a bare value of `%x21-7E` without `"`, `\` and `,` either. Several field lines always
 *   end here, because combining them yields a comma-separated value.
 * - `empty`: an empty field value, or the empty string `""`.
 * - `too_long` / `too_short`: the length bounds of {@link KeyRules}.
 * - `pattern`: {@link KeyRules.keyPattern} did not match.
 */
export type InvalidKeyReason = 'syntax' | 'empty' | 'too_long' | 'too_short' | 'pattern';

/**
 * The outcome of reading the field: absent, a usable key, or a rejection that the caller must
 * turn into a 400 before any store access (docs/contract.md B.2 rule 7).
 *
 * @publicApi
 */
export type ParsedKey =
  { kind: 'missing' } | { kind: 'valid'; key: string } | { kind: 'invalid'; reason: InvalidKeyReason };

const MISSING: ParsedKey = Object.freeze({ kind: 'missing' });
const INVALID: Readonly<Record<InvalidKeyReason, ParsedKey>> = Object.freeze({
  syntax: Object.freeze({ kind: 'invalid', reason: 'syntax' }),
  empty: Object.freeze({ kind: 'invalid', reason: 'empty' }),
  too_long: Object.freeze({ kind: 'invalid', reason: 'too_long' }),
  too_short: Object.freeze({ kind: 'invalid', reason: 'too_short' }),
  pattern: Object.freeze({ kind: 'invalid', reason: 'pattern' }),
});

const SP = 0x20;
const HTAB = 0x09;
const DQUOTE = 0x22;
const COMMA = 0x2c;
const BACKSLASH = 0x5c;

/**
 * Reads an `Idempotency-Key` field into a key or a precise rejection (docs/contract.md B.2 rules 4–7).
 *
 * Each field line is OWS-trimmed (HTTP strips it from field values) and several lines are
 * combined with `", "` (RFC 9651 §4.2) before parsing, so a key sent twice is a `syntax` error
 * rather than a silent choice of one of them. Then:
 *
 * - `sf-string`: the value must be an RFC 9651 Item whose bare item is a String; parameters are
 *   syntax-checked and ignored (`"k";v=1` is `k`).
 * - `compat`: as above when the value starts with `"`; otherwise the raw value is the key if it
 *   is made of `%x21-7E` minus `"`, `\` and `,` (so bare `abc;v=1` is the literal `abc;v=1`).
 *   A value without a leading `"` can never be a String Item and a value with a `"` can never
 *   be a valid raw key, so this split gives exactly the two-step rule of the contract while
 *   scanning the value only once.
 *
 * The key is then checked against {@link KeyRules}, counting characters after unescaping;
 * comparison downstream is exact, so case and spaces inside quotes are significant.
 *
 * @param field the header as Node exposes it: `undefined` when absent, an array when the
 *   field was sent on several lines (e.g. `req.headersDistinct`).
 * @example
 * parseIdempotencyKey('"8e03978e-40d5"', rules); // { kind: 'valid', key: '8e03978e-40d5' }
 * parseIdempotencyKey(['"a"', '"b"'], rules);     // { kind: 'invalid', reason: 'syntax' }
 */
export function parseIdempotencyKey(field: string | string[] | undefined, rules: KeyRules): ParsedKey {
  const value = combineFieldLines(field);
  if (value === undefined) return MISSING;
  if (value.length === 0) return INVALID.empty;

  let key: string | undefined;
  if (value.charCodeAt(0) === DQUOTE) {
    key = parseStringItem(value);
    if (key === undefined) return INVALID.syntax;
  } else {
    if (rules.keySyntax === 'sf-string' || !isRawKey(value)) return INVALID.syntax;
    key = value;
  }
  return checkRules(key, rules);
}

function checkRules(key: string, rules: KeyRules): ParsedKey {
  if (key.length === 0) return INVALID.empty;
  if (key.length > rules.maxKeyLength) return INVALID.too_long;
  if (key.length < rules.minKeyLength) return INVALID.too_short;
  const pattern = rules.keyPattern;
  if (pattern !== undefined) {
    // A /g or /y pattern keeps state between calls; without this, every other key would fail.
    if (pattern.global || pattern.sticky) pattern.lastIndex = 0;
    if (!pattern.test(key)) return INVALID.pattern;
  }
  return { kind: 'valid', key };
}

function combineFieldLines(field: string | string[] | undefined): string | undefined {
  if (field === undefined) return undefined;
  if (typeof field === 'string') return trimOws(field);
  if (field.length === 0) return undefined;
  if (field.length === 1) return trimOws(field[0]);
  return field.map(trimOws).join(', ');
}

function trimOws(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && isOws(value.charCodeAt(start))) start++;
  while (end > start && isOws(value.charCodeAt(end - 1))) end--;
  return start === 0 && end === value.length ? value : value.slice(start, end);
}

function isOws(code: number): boolean {
  return code === SP || code === HTAB;
}

/** The raw-value form of `compat` mode: 1+ characters of %x21-7E except DQUOTE, "\" and ",". */
function isRawKey(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x21 || c > 0x7e || c === DQUOTE || c === BACKSLASH || c === COMMA) return false;
  }
  return true;
}
