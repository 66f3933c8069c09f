import { isUtf8 } from 'node:buffer';

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
 *
 * @publicApi
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
 *
 * @publicApi
 */
export type InvalidKeyReason = 'syntax' | 'empty' | 'too_long' | 'too_short' | 'pattern';

/**
 * The outcome of reading the field: absent, a usable key, or a rejection that the caller must
 * turn into a 400 before any store access (docs/contract.md B.2 rule 7).
 *
 * @publicApi
 */
export type ParsedKey =
  | { kind: 'missing' }
  | { kind: 'valid'; key: string }
  | { kind: 'invalid'; reason: InvalidKeyReason };

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
const PERCENT = 0x25;
const STAR = 0x2a;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const COLON = 0x3a;
const SEMICOLON = 0x3b;
const EQUALS = 0x3d;
const QUESTION = 0x3f;
const AT = 0x40;
const BACKSLASH = 0x5c;

/** Character classes of RFC 9651 §4.2, as bit flags over ASCII (charCodeAt is never > 0x7f here). */
const DIGIT = 1;
const ALPHA = 2;
const LCALPHA = 4;
const KEY_CHAR = 8; // lcalpha / DIGIT / "_" / "-" / "." / "*"
const TOKEN_CHAR = 16; // tchar / ":" / "/"
const BASE64_CHAR = 32; // ALPHA / DIGIT / "+" / "/" / "="
const LCHEX = 64; // 0-9 a-f: Display String escapes are lower-case only

const CLASSES = (() => {
  const table = new Uint8Array(128);
  const add = (chars: string, flag: number): void => {
    for (let i = 0; i < chars.length; i++) table[chars.charCodeAt(i)] |= flag;
  };
  const digits = '0123456789';
  const lower = 'abcdefghijklmnopqrstuvwxyz';
  const upper = lower.toUpperCase();
  add(digits, DIGIT | KEY_CHAR | TOKEN_CHAR | BASE64_CHAR | LCHEX);
  add(lower, ALPHA | LCALPHA | KEY_CHAR | TOKEN_CHAR | BASE64_CHAR);
  add(upper, ALPHA | TOKEN_CHAR | BASE64_CHAR);
  add('abcdef', LCHEX);
  add('_-.*', KEY_CHAR);
  add("!#$%&'*+-.^_`|~:/", TOKEN_CHAR);
  add('+/=', BASE64_CHAR);
  return table;
})();

const is = (code: number, flag: number): boolean => code < 128 && (CLASSES[code] & flag) !== 0;

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
 * @publicApi
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

/**
 * Parses a whole field value as an RFC 9651 Item whose bare item is a String (§4.2, §4.2.3,
 * §4.2.5) and returns the unescaped string, or `undefined` when the value is anything else.
 * `value` starts with DQUOTE and carries no surrounding OWS.
 */
function parseStringItem(value: string): string | undefined {
  const end = scanString(value, 1);
  if (end < 0) return undefined;
  if (end < value.length && !parametersReachEnd(value, end)) return undefined;
  const body = value.slice(1, end - 1);
  return body.indexOf('\\') < 0 ? body : body.replace(/\\(["\\])/g, '$1');
}

/**
 * Scans an RFC 9651 String whose opening DQUOTE is just before `i` (§4.2.5): only `\"` and `\\`
 * escapes, only %x20-7E characters. Returns the index after the closing DQUOTE, or -1.
 */
function scanString(s: string, i: number): number {
  const n = s.length;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c === DQUOTE) return i + 1;
    if (c === BACKSLASH) {
      const next = s.charCodeAt(i + 1);
      if (next !== DQUOTE && next !== BACKSLASH) return -1;
      i += 2;
    } else if (c < 0x20 || c > 0x7e) {
      return -1;
    } else {
      i++;
    }
  }
  return -1;
}

/**
 * Checks RFC 9651 Parameters (§4.2.3.2) from `i`, then that only SP remains (§4.2). Parameter
 * values are validated, never kept: the contract ignores them.
 */
function parametersReachEnd(s: string, i: number): boolean {
  const n = s.length;
  while (i < n && s.charCodeAt(i) === SEMICOLON) {
    i++;
    while (s.charCodeAt(i) === SP) i++;
    const first = s.charCodeAt(i);
    if (!is(first, LCALPHA) && first !== STAR) return false;
    i++;
    while (i < n && is(s.charCodeAt(i), KEY_CHAR)) i++;
    if (s.charCodeAt(i) === EQUALS) {
      i = skipBareItem(s, i + 1);
      if (i < 0) return false;
    }
  }
  while (s.charCodeAt(i) === SP) i++;
  return i === n;
}

/** Skips one RFC 9651 bare item (§4.2.3.1); returns the index after it, or -1 if malformed. */
function skipBareItem(s: string, i: number): number {
  const c = s.charCodeAt(i);
  if (c === MINUS || is(c, DIGIT)) return skipNumber(s, i, true);
  if (c === DQUOTE) return scanString(s, i + 1);
  if (is(c, ALPHA) || c === STAR) return skipToken(s, i + 1);
  if (c === COLON) return skipByteSequence(s, i + 1);
  if (c === QUESTION) return skipBoolean(s, i + 1);
  if (c === AT) return skipNumber(s, i + 1, false);
  if (c === PERCENT) return skipDisplayString(s, i + 1);
  return -1;
}

/**
 * RFC 9651 Integer or Decimal (§4.2.4), also used for Date (§4.2.9, integers only): at most
 * 15 integer digits, at most 12 digits before a decimal point and 3 after it.
 */
function skipNumber(s: string, i: number, allowDecimal: boolean): number {
  if (s.charCodeAt(i) === MINUS) i++;
  if (!is(s.charCodeAt(i), DIGIT)) return -1;
  const n = s.length;
  let length = 0;
  let fraction = -1;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (is(c, DIGIT)) {
      length++;
      if (fraction >= 0) fraction++;
    } else if (c === DOT && fraction < 0) {
      if (length > 12) return -1;
      length++;
      fraction = 0;
    } else {
      break;
    }
    if (fraction < 0 ? length > 15 : length > 16) return -1;
    i++;
  }
  if (fraction < 0) return i;
  if (!allowDecimal || fraction === 0 || fraction > 3) return -1;
  return i;
}

/** RFC 9651 Token (§4.2.6) after its first character. */
function skipToken(s: string, i: number): number {
  while (i < s.length && is(s.charCodeAt(i), TOKEN_CHAR)) i++;
  return i;
}

/**
 * RFC 9651 Byte Sequence (§4.2.7) after its opening ":". The content must be decodable base64;
 * as §4.2.7 allows, padding is not required, but nothing may follow the first "=" except "=".
 */
function skipByteSequence(s: string, i: number): number {
  const end = s.indexOf(':', i);
  if (end < 0) return -1;
  let padding = -1;
  for (let k = i; k < end; k++) {
    const c = s.charCodeAt(k);
    if (!is(c, BASE64_CHAR)) return -1;
    if (c === EQUALS) {
      if (padding < 0) padding = k;
    } else if (padding >= 0) {
      return -1;
    }
  }
  const data = (padding < 0 ? end : padding) - i;
  // A lone sextet in the last group cannot encode a whole byte.
  return data % 4 === 1 ? -1 : end + 1;
}

/** RFC 9651 Boolean (§4.2.8) after its "?". */
function skipBoolean(s: string, i: number): number {
  const c = s.charCodeAt(i);
  return c === 0x30 || c === 0x31 ? i + 1 : -1;
}

/**
 * RFC 9651 Display String (§4.2.10) after its "%": lower-case `%xx` escapes only, and the
 * escaped bytes must decode as UTF-8.
 */
function skipDisplayString(s: string, i: number): number {
  if (s.charCodeAt(i) !== DQUOTE) return -1;
  i++;
  const n = s.length;
  let bytes: number[] | undefined;
  while (i < n) {
    const c = s.charCodeAt(i);
    if (c <= 0x1f || c >= 0x7f) return -1;
    if (c === DQUOTE) {
      return bytes === undefined || isUtf8(Uint8Array.from(bytes)) ? i + 1 : -1;
    }
    if (c === PERCENT) {
      const hi = s.charCodeAt(i + 1);
      const lo = s.charCodeAt(i + 2);
      if (!is(hi, LCHEX) || !is(lo, LCHEX)) return -1;
      (bytes ??= []).push(parseInt(s.slice(i + 1, i + 3), 16));
      i += 3;
    } else {
      (bytes ??= []).push(c);
      i++;
    }
  }
  return -1;
}
