import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { readMultipart, type MultipartPart } from './multipart-parts.js';
import { readUrlencoded, type UrlencodedPair } from './urlencoded-pairs.js';

/**
 * How `application/json` and `*\/*+json` bodies enter the fingerprint (docs/contract.md B.4 rule 15).
 *
 * - `lossless` (default): key order and whitespace are ignored, but number tokens are kept as
 *   written, so `1` and `1.0` differ. A false mismatch is a visible 422; a false match silently
 *   replays the answer to a different request.
 * - `jcs`: numbers are normalised through IEEE-754 doubles as in RFC 8785, so `1.0` equals `1`
 *   and 9007199254740993 equals 9007199254740992.
 * - `raw-bytes`: the body bytes as sent.
 *
 * @publicApi
 */
export type JsonFingerprintMode = 'lossless' | 'jcs' | 'raw-bytes';

/**
 * A file an upload interceptor (multer's `FileInterceptor` and the like) took out of a
 * multipart body, as it enters the fingerprint (docs/contract.md B.4 rule 15).
 *
 * @publicApi
 */
export interface UploadedFileDigest {
  /** The form field the file was sent in. */
  field: string;
  /** The filename the client sent (multer's `originalname`). */
  filename?: string;
  /** The content type the client declared for the part. */
  mimeType?: string;
  /** The transfer encoding the client declared for the part (multer's `encoding`). */
  encoding?: string;
  /** SHA-256 of the content. */
  sha256: Buffer;
}

/**
 * A body whose raw bytes are gone, as the layers before the interceptor left it: the parsed
 * fields (`request.body`) and the files an upload interceptor stored.
 *
 * @publicApi
 */
export interface ParsedRequestBody {
  /** `request.body`: strings, numbers, booleans, null, buffers, arrays and plain objects. */
  fields: unknown;
  /** Uploaded files, in the order the upload interceptor lists them. @default [] */
  files?: UploadedFileDigest[];
}

/**
 * The parts of a request that decide whether a retry is "the same request" (docs/contract.md B.4 rule 14).
 *
 * @publicApi
 */
export interface FingerprintInput {
  /** HTTP method as received (methods are case-sensitive, RFC 9110 §9.1). */
  method: string;
  /** Route template, e.g. `/v1/accounts/:accountId/transfers`. */
  routeTemplate: string;
  /** Decoded path parameters. */
  pathParams: Record<string, string>;
  /** The raw query string without `?`; `''` when there is none. */
  query: string;
  /** The raw `Content-Type` header; only its essence (`type/subtype`, lower-cased) is used. */
  contentType?: string;
  /** The raw body bytes; `undefined` and an empty buffer both mean "no body". */
  body?: Buffer;
  /**
   * The body as parsed, for a request whose raw bytes were not kept (used when `body` is empty).
   * Only give it when it is all the handler can see of the body: a part left out is a part two
   * requests may differ in without a 422.
   */
  parsedBody?: ParsedRequestBody;
  /**
   * The configured `fingerprint.headers`, already read. Names are compared case-insensitively;
   * leave an absent header out of the list rather than passing `''`, so the two stay distinct.
   */
  headers?: Array<[name: string, value: string]>;
  /**
   * Identity parts moved into the fingerprint: every scope dimension that is resolved but left
   * out of the scope, e.g. `{ tenant, operation }` with `scope: ['principal']` (docs/contract.md B.3 rule 12a).
   */
  extra?: Record<string, string>;
  /** @default 'lossless' */
  json?: JsonFingerprintMode;
}

const FINGERPRINT_VERSION = 'idempotency-fingerprint/v1';
const MAX_JSON_DEPTH = 1000;
const MAX_VALUE_DEPTH = 1000;

/**
 * Computes the request fingerprint of docs/contract.md B.4: SHA-256, base64url (43 characters), over an
 * injective encoding of the method, route template, path parameters, query, media type essence,
 * body, configured headers and `extra`.
 *
 * Every string is length-prefixed and every list count-prefixed, in a fixed order, so no two
 * different inputs can produce the same encoding by shifting content between parts. Path
 * parameters, headers (by lower-cased name) and `extra` are sorted by name. The query and a form
 * body are read as {@link readUrlencoded} describes: decoded as the platform's parsers decode
 * (a value with an invalid escape is kept as sent, whole), sorted by name root, repeated values
 * in their order; above 1000 `&`-separated sequences, their raw bytes.
 *
 * The body enters by media type essence (rule 15), tagged with the form used:
 * - JSON (`application/json`, `*\/*+json`): its {@link canonicalizeJson} text in the configured
 *   mode. A body that is not valid UTF-8 JSON (including one with a byte order mark, or nested
 *   deeper than 1000 levels) is taken as raw bytes instead: such a request normally never
 *   reaches the handler, and raw bytes can only make two requests differ, never falsely match.
 * - `application/x-www-form-urlencoded`: the pairs, like the query.
 * - `multipart/form-data`: the parts in order, each as name, filename, content type, transfer
 *   encoding and SHA-256 of the content; the boundary, preamble and epilogue are excluded, since
 *   clients pick a fresh boundary on every send. Parts busboy skips (no `form-data` disposition)
 *   are not part of it. A malformed body, or a text field whose declared charset may have lost
 *   bytes in decoding, is taken as raw bytes.
 * - anything else, and an empty body: SHA-256 of the raw bytes (so an empty body differs from `{}`).
 * - no raw bytes but a `parsedBody`: its fields as a typed tree (object members sorted by name,
 *   array items in order) and its files' field, filename, content type, encoding and digest.
 *
 * @throws TypeError when `parsedBody.fields` holds a value of another kind than those listed
 *   (a class instance, a function, a symbol) or nests deeper than 1000 levels.
 * @example
 * const fingerprint = await computeFingerprint({
 *   method: 'POST', routeTemplate: '/orders', pathParams: {}, query: req.url.split('?')[1] ?? '',
 *   contentType: req.headers['content-type'], body: rawBody,
 * });
 * @publicApi
 */
export async function computeFingerprint(input: FingerprintInput): Promise<string> {
  const mediaType = mediaTypeEssence(input.contentType);
  const body = await readBody(mediaType, input.contentType ?? '', input, input.json ?? 'lossless');

  const out = new CanonicalEncoder(FINGERPRINT_VERSION);
  out.text(input.method);
  out.text(input.routeTemplate);
  out.textMap(input.pathParams);
  writeQuery(out, Buffer.from(input.query, 'utf8'));
  out.text(mediaType);
  writeBody(out, body);
  const headers = (input.headers ?? []).map(([name, value]): [string, string] => [name.toLowerCase(), value]);
  out.textPairs(headers.sort(byFirst));
  out.textMap(input.extra ?? {});
  return out.digest().toString('base64url');
}

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
 * @publicApi
 */
export function canonicalizeJson(text: string, mode: 'lossless' | 'jcs'): string {
  return new JsonCanonicalizer(text, mode === 'jcs').run();
}

/** The body as it enters the fingerprint; `kind` is written first, so the forms never collide. */
type BodyView =
  | { kind: 'raw'; digest: Buffer }
  | { kind: 'json'; canonical: string }
  | { kind: 'form'; pairs: UrlencodedPair[] }
  | { kind: 'multipart'; parts: MultipartPart[] }
  | { kind: 'parsed'; body: ParsedRequestBody };

async function readBody(
  mediaType: string,
  contentType: string,
  { body, parsedBody }: FingerprintInput,
  mode: JsonFingerprintMode,
): Promise<BodyView> {
  if (body === undefined || body.length === 0) {
    return parsedBody === undefined ? { kind: 'raw', digest: EMPTY_SHA256 } : { kind: 'parsed', body: parsedBody };
  }
  if (isJsonMediaType(mediaType)) {
    if (mode !== 'raw-bytes') {
      const canonical = tryCanonicalJson(body, mode);
      if (canonical !== undefined) return { kind: 'json', canonical };
    }
  } else if (mediaType === 'application/x-www-form-urlencoded') {
    const pairs = readUrlencoded(body);
    if (pairs !== undefined) return { kind: 'form', pairs };
  } else if (mediaType === 'multipart/form-data') {
    const parts = await readMultipart(contentType, body);
    if (parts !== undefined) return { kind: 'multipart', parts };
  }
  return { kind: 'raw', digest: createHash('sha256').update(body).digest() };
}

const EMPTY_SHA256 = createHash('sha256').digest();

/**
 * The query as pairs (a count first), or, when only its bytes can be compared, `raw` and their
 * digest: a count is written `<n>;` and a string `<n>:`, so the two forms cannot be confused.
 */
function writeQuery(out: CanonicalEncoder, query: Buffer): void {
  const pairs = readUrlencoded(query);
  if (pairs === undefined) {
    out.text('raw');
    out.bytes(createHash('sha256').update(query).digest());
  } else {
    out.urlencodedPairs(pairs);
  }
}

function writeBody(out: CanonicalEncoder, body: BodyView): void {
  out.text(body.kind);
  switch (body.kind) {
    case 'raw':
      out.bytes(body.digest);
      break;
    case 'json':
      out.text(body.canonical);
      break;
    case 'form':
      out.urlencodedPairs(body.pairs);
      break;
    case 'multipart':
      out.count(body.parts.length);
      for (const part of body.parts) {
        out.text(part.kind);
        out.optionalText(part.name);
        out.optionalText(part.filename);
        out.text(part.mimeType.toLowerCase());
        out.text(part.encoding.toLowerCase());
        out.bytes(part.digest);
      }
      break;
    case 'parsed': {
      out.value(body.body.fields);
      const files = body.body.files ?? [];
      out.count(files.length);
      for (const file of files) {
        out.text(file.field);
        out.optionalText(file.filename);
        out.optionalText(file.mimeType?.toLowerCase());
        out.optionalText(file.encoding?.toLowerCase());
        out.bytes(file.sha256);
      }
      break;
    }
  }
}

function mediaTypeEssence(contentType: string | undefined): string {
  if (contentType === undefined) return '';
  const semicolon = contentType.indexOf(';');
  return trimOws(semicolon < 0 ? contentType : contentType.slice(0, semicolon)).toLowerCase();
}

function isJsonMediaType(essence: string): boolean {
  return essence === 'application/json' || (essence.endsWith('+json') && essence.indexOf('/') > 0);
}

function trimOws(value: string): string {
  let start = 0;
  let end = value.length;
  while (start < end && (value.charCodeAt(start) === 0x20 || value.charCodeAt(start) === 0x09)) start++;
  while (end > start && (value.charCodeAt(end - 1) === 0x20 || value.charCodeAt(end - 1) === 0x09)) end--;
  return value.slice(start, end);
}

function tryCanonicalJson(body: Buffer, mode: 'lossless' | 'jcs'): string | undefined {
  if (!isUtf8(body)) return undefined;
  try {
    return canonicalizeJson(body.toString('utf8'), mode);
  } catch (error) {
    if (error instanceof SyntaxError) return undefined;
    throw error;
  }
}

function byFirst(a: [string, unknown], b: [string, unknown]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}

/**
 * Builds a self-delimiting string and hashes it once, as UTF-16 code units (injective even for
 * lone surrogates): every string is written as `<length>:<content>` and every list as `<count>;`
 * followed by its items, in a fixed order, so the stream parses back in exactly one way. Byte
 * strings are written one character per byte (latin1), which is injective too.
 */
class CanonicalEncoder {
  private out = '';

  constructor(domain: string) {
    this.text(domain);
  }

  count(n: number): void {
    this.out += `${n};`;
  }

  bytes(data: Buffer): void {
    this.out += `${data.length}:${data.toString('latin1')}`;
  }

  text(value: string): void {
    this.out += `${value.length}:${value}`;
  }

  /** An absent value and `''` must differ (e.g. a part without a filename vs `filename=""`). */
  optionalText(value: string | undefined): void {
    if (value === undefined) {
      this.count(0);
    } else {
      this.count(1);
      this.text(value);
    }
  }

  textMap(map: Record<string, string | undefined>): void {
    const names = Object.keys(map).sort();
    this.count(names.length);
    for (const name of names) {
      this.text(name);
      this.optionalText(map[name]);
    }
  }

  textPairs(pairs: ReadonlyArray<[string, string]>): void {
    this.count(pairs.length);
    for (const [name, value] of pairs) {
      this.text(name);
      this.text(value);
    }
  }

  /** Each name and value as its form (decoded, raw, segment) and bytes. */
  urlencodedPairs(pairs: readonly UrlencodedPair[]): void {
    this.count(pairs.length);
    for (const pair of pairs) {
      for (const token of pair) {
        this.text(token.form);
        this.bytes(token.bytes);
      }
    }
  }

  /**
   * A parsed value as a typed tree: each node is written as a one-letter type and its content,
   * object members sorted by name (UTF-16 code units), array items in order.
   */
  value(value: unknown, depth = 0): void {
    if (depth > MAX_VALUE_DEPTH) throw new TypeError(`A parsed body nested deeper than ${MAX_VALUE_DEPTH} levels cannot be fingerprinted.`);
    switch (typeof value) {
      case 'string':
        this.text('s');
        this.text(value);
        return;
      case 'number':
        this.text('n');
        this.text(Object.is(value, -0) ? '-0' : String(value));
        return;
      case 'bigint':
        this.text('i');
        this.text(String(value));
        return;
      case 'boolean':
        this.text(value ? 't' : 'f');
        return;
      case 'undefined':
        this.text('u');
        return;
    }
    if (value === null) {
      this.text('z');
    } else if (Buffer.isBuffer(value)) {
      this.text('x');
      this.bytes(value);
    } else if (Array.isArray(value)) {
      this.text('a');
      this.count(value.length);
      for (let i = 0; i < value.length; i++) this.value(value[i], depth + 1);
    } else if (typeof value === 'object' && isPlainObject(value)) {
      const record = value as Record<string, unknown>;
      const names = Object.keys(record).sort();
      this.text('o');
      this.count(names.length);
      for (const name of names) {
        this.text(name);
        this.value(record[name], depth + 1);
      }
    } else {
      const kind = typeof value === 'object' ? `an instance of ${value.constructor?.name ?? 'an unknown class'}` : `a ${typeof value}`;
      throw new TypeError(`A parsed body holding ${kind} cannot be fingerprinted: only strings, numbers, booleans, null, buffers, arrays and plain objects can.`);
    }
  }

  digest(): Buffer {
    return createHash('sha256').update(this.out, 'utf16le').digest();
  }
}

/**
 * A dictionary: `{}`, `Object.create(null)`, or an instance of an empty class whose prototype
 * has no prototype (how fast-querystring, Fastify's query and form parser, builds its result).
 */
function isPlainObject(value: object): boolean {
  const prototype = Object.getPrototypeOf(value);
  if (prototype === null || prototype === Object.prototype) return true;
  return Object.getPrototypeOf(prototype) === null && Object.getOwnPropertyNames(prototype).length === 0;
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

function joinSortedMembers(members: Member[]): string {
  if (members.length > 1) members.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
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
