/**
 * Canonical JSON text (RFC 8785 style): what a JSON body contributes to the request
 * fingerprint, in `lossless` or `jcs` number mode.
 */

const MAX_JSON_DEPTH = 1000;

/**
 * Canonicalises a JSON text so that equal documents compare equal as strings: object members
 * sorted by UTF-16 code units (stable, so duplicate names keep their order), insignificant
 * whitespace removed, strings decoded and re-escaped as RFC 8785 (JCS) requires. In `lossless`
 * mode number tokens are kept exactly as written; in `jcs` mode they are serialised as
 * ECMAScript doubles (`1.0` → `1`, `1E30` → `1e+30`), as RFC 8785 §3.2.2.3 specifies.
 *
 * The parser is a single iterative pass (no recursion), so payload depth cannot overflow the
 * stack. Deviations from strict JCS, chosen so nothing is lost rather than to reject input:
 * duplicate member names are kept, and lone surrogates are re-escaped as `\udxxx` (what
 * `JSON.stringify` does) instead of being rejected.
 *
 * @throws SyntaxError when `text` is not RFC 8259 JSON (a byte order mark included), when
 *   containers nest deeper than 1000 levels, or in `jcs` mode when a number overflows a double.
 * @example
 * canonicalizeJson('{ "b": 1.0, "a": [true] }', 'lossless'); // '{"a":[true],"b":1.0}'
 */
export function canonicalizeJson(text: string, mode: 'lossless' | 'jcs'): string {
  return new JsonCanonicalizer(text, mode === 'jcs').run();
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const LBRACE = 0x7b;
const RBRACE = 0x7d;

interface Member {
  key: string;
  text: string;
}

class ObjectFrame {
  readonly members: Member[] = [];
  key = '';
  keyText = '';
}

class ArrayFrame {
  readonly items: string[] = [];
}

/**
 * One pass over the text with an explicit stack of open containers. Each finished value is
 * produced as its canonical text; objects collect `key:value` texts and sort them on close.
 */
class JsonCanonicalizer {
  private pos = 0;
  private decoded = '';
  private serialized = '';

  constructor(
    private readonly src: string,
    private readonly jcsNumbers: boolean,
  ) {}

  run(): string {
    const s = this.src;
    const stack: Array<ObjectFrame | ArrayFrame> = [];
    let i = skipWhitespace(s, 0);
    let value: string;
    for (;;) {
      const c = s.charCodeAt(i);
      if (c === LBRACE || c === LBRACKET) {
        if (stack.length >= MAX_JSON_DEPTH) this.fail(i, `nesting deeper than ${MAX_JSON_DEPTH} levels`);
        i = skipWhitespace(s, i + 1);
        if (s.charCodeAt(i) === (c === LBRACE ? RBRACE : RBRACKET)) {
          value = c === LBRACE ? '{}' : '[]';
          i++;
        } else if (c === LBRACE) {
          const frame = new ObjectFrame();
          stack.push(frame);
          i = this.readKey(frame, i);
          continue;
        } else {
          stack.push(new ArrayFrame());
          continue;
        }
      } else if (c === QUOTE) {
        this.readString(i);
        value = this.serialized;
        i = this.pos;
      } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
        value = this.readNumber(i);
        i = this.pos;
      } else if (c === 0x74 && s.startsWith('true', i)) {
        value = 'true';
        i += 4;
      } else if (c === 0x66 && s.startsWith('false', i)) {
        value = 'false';
        i += 5;
      } else if (c === 0x6e && s.startsWith('null', i)) {
        value = 'null';
        i += 4;
      } else {
        this.fail(i, i < s.length ? 'unexpected character' : 'unexpected end of input');
      }

      // Close every container the value completes, until one expects another value.
      for (;;) {
        i = skipWhitespace(s, i);
        const top = stack[stack.length - 1];
        if (top === undefined) {
          if (i !== s.length) this.fail(i, 'unexpected data after the JSON value');
          return value;
        }
        const next = s.charCodeAt(i);
        if (top instanceof ArrayFrame) {
          top.items.push(value);
          if (next === COMMA) {
            i = skipWhitespace(s, i + 1);
            break;
          }
          if (next !== RBRACKET) this.fail(i, 'expected "," or "]"');
          value = `[${top.items.join(',')}]`;
        } else {
          top.members.push({ key: top.key, text: `${top.keyText}:${value}` });
          if (next === COMMA) {
            i = this.readKey(top, skipWhitespace(s, i + 1));
            break;
          }
          if (next !== RBRACE) this.fail(i, 'expected "," or "}"');
          value = `{${joinSortedMembers(top.members)}}`;
        }
        stack.pop();
        i++;
      }
    }
  }

  /** Reads `"name" :` into the frame and returns where the member's value starts. */
  private readKey(frame: ObjectFrame, i: number): number {
    if (this.src.charCodeAt(i) !== QUOTE) this.fail(i, 'expected a member name');
    this.readString(i);
    frame.key = this.decoded;
    frame.keyText = this.serialized;
    i = skipWhitespace(this.src, this.pos);
    if (this.src.charCodeAt(i) !== COLON) this.fail(i, 'expected ":"');
    return skipWhitespace(this.src, i + 1);
  }

  /**
   * Reads the string whose opening quote is at `start` into `decoded` and `serialized`. A string
   * without escapes or lone surrogates is already in JCS form, so it is sliced, not rebuilt.
   */
  private readString(start: number): void {
    const s = this.src;
    const n = s.length;
    let plain = true;
    let i = start + 1;
    for (;;) {
      if (i >= n) this.fail(start, 'unterminated string');
      const c = s.charCodeAt(i);
      if (c === QUOTE) break;
      if (c === BACKSLASH) {
        plain = false;
        i += 2;
        continue;
      }
      if (c < 0x20) this.fail(i, 'unescaped control character in string');
      if (c >= 0xd800 && c <= 0xdfff) {
        const low = s.charCodeAt(i + 1);
        if (c <= 0xdbff && low >= 0xdc00 && low <= 0xdfff) {
          i += 2;
          continue;
        }
        plain = false;
      }
      i++;
    }
    this.pos = i + 1;
    if (plain) {
      this.decoded = s.slice(start + 1, i);
      this.serialized = s.slice(start, i + 1);
    } else {
      this.decoded = this.unescape(start + 1, i);
      // JSON.stringify escapes exactly as RFC 8785 §3.2.2.2 requires (it is the ES algorithm).
      this.serialized = JSON.stringify(this.decoded);
    }
  }

  private unescape(from: number, to: number): string {
    const s = this.src;
    let out = '';
    let segment = from;
    let i = from;
    while (i < to) {
      if (s.charCodeAt(i) !== BACKSLASH) {
        i++;
        continue;
      }
      out += s.slice(segment, i);
      const escape = s.charCodeAt(i + 1);
      let length = 2;
      switch (escape) {
        case QUOTE:
          out += '"';
          break;
        case BACKSLASH:
          out += '\\';
          break;
        case 0x2f:
          out += '/';
          break;
        case 0x62:
          out += '\b';
          break;
        case 0x66:
          out += '\f';
          break;
        case 0x6e:
          out += '\n';
          break;
        case 0x72:
          out += '\r';
          break;
        case 0x74:
          out += '\t';
          break;
        case 0x75: {
          const code = hex4(s, i + 2, to);
          if (code < 0) this.fail(i, 'invalid \\u escape');
          out += String.fromCharCode(code);
          length = 6;
          break;
        }
        default:
          this.fail(i, 'invalid escape');
      }
      i += length;
      segment = i;
    }
    return out + s.slice(segment, to);
  }

  /** RFC 8259 §6 number grammar; the token as written, or its ES serialisation in `jcs` mode. */
  private readNumber(start: number): string {
    const s = this.src;
    let i = start;
    if (s.charCodeAt(i) === 0x2d) i++;
    const first = s.charCodeAt(i);
    if (first === 0x30) {
      i++;
    } else if (first >= 0x31 && first <= 0x39) {
      i = skipDigits(s, i + 1);
    } else {
      this.fail(i, 'expected a digit');
    }
    if (s.charCodeAt(i) === 0x2e) {
      if (!isDigit(s.charCodeAt(i + 1))) this.fail(i + 1, 'expected a digit after "."');
      i = skipDigits(s, i + 1);
    }
    const e = s.charCodeAt(i);
    if (e === 0x65 || e === 0x45) {
      i++;
      const sign = s.charCodeAt(i);
      if (sign === 0x2b || sign === 0x2d) i++;
      if (!isDigit(s.charCodeAt(i))) this.fail(i, 'expected a digit in the exponent');
      i = skipDigits(s, i);
    }
    this.pos = i;
    const token = s.slice(start, i);
    if (!this.jcsNumbers) return token;
    const number = Number(token);
    if (!Number.isFinite(number)) this.fail(start, 'number out of IEEE-754 double range');
    return String(number);
  }

  private fail(position: number, reason: string): never {
    throw new SyntaxError(`Invalid JSON at offset ${position}: ${reason}`);
  }
}

/** Up to this many members, an insertion sort: stable like `Array#sort`, without its scratch arrays. */
const INSERTION_SORT_MAX = 16;

function joinSortedMembers(members: Member[]): string {
  if (members.length > INSERTION_SORT_MAX) members.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  else {
    for (let i = 1; i < members.length; i++) {
      const member = members[i];
      let j = i - 1;
      // Strictly greater only: equal names keep their order (duplicate members).
      for (; j >= 0 && members[j].key > member.key; j--) members[j + 1] = members[j];
      members[j + 1] = member;
    }
  }
  let out = members[0].text;
  for (let i = 1; i < members.length; i++) out += `,${members[i].text}`;
  return out;
}

function skipWhitespace(s: string, i: number): number {
  for (;;) {
    const c = s.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function skipDigits(s: string, i: number): number {
  while (isDigit(s.charCodeAt(i))) i++;
  return i;
}

function hex4(s: string, i: number, end: number): number {
  if (i + 4 > end) return -1;
  let code = 0;
  for (let k = i; k < i + 4; k++) {
    const digit = hexValue(s.charCodeAt(k));
    if (digit < 0) return -1;
    code = (code << 4) | digit;
  }
  return code;
}
