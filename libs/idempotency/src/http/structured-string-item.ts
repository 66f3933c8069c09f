/**
 * The quoted form of an `Idempotency-Key`: an RFC 9651 Item whose bare item is a String, its
 * parameters syntax-checked and dropped.
 */
import { isUtf8 } from 'node:buffer';

const SP = 0x20;
const DQUOTE = 0x22;
const PERCENT = 0x25;
const STAR = 0x2a;
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
 * Parses a whole field value as an RFC 9651 Item whose bare item is a String (§4.2, §4.2.3,
 * §4.2.5) and returns the unescaped string, or `undefined` when the value is anything else.
 * `value` starts with DQUOTE and carries no surrounding OWS.
 */
export function parseStringItem(value: string): string | undefined {
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
