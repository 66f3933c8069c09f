/**
 * The compact form of a stored response's headers in the Redis record (flag 16 of
 * redis-record-format.ts, @internal): what JSON spends on quotes, colons and the names and values
 * every JSON API repeats, a record of a 310-byte order spends on its body instead, which keeps it
 * in a smaller Redis allocation without compressing it (see response-packing.ts).
 *
 * A sequence of entries, one per header value:
 *
 * | bytes        | field                                                                      |
 * |--------------|----------------------------------------------------------------------------|
 * | 1            | name: bit 7 set = one element of an array value; bits 0-6: index + 1 in `NAMES`, or 0 = literal |
 * | (1 + n)      | literal name: u8 length, UTF-8 bytes                                        |
 * | 1            | value: index + 1 in `VALUES`, or 0 = literal                                |
 * | (2 + n)      | literal value: u16 length (big-endian), UTF-8 bytes                         |
 *
 * The two tables are part of the stored format: entries may be appended, never changed, removed
 * or reordered (a record names them by position).
 */
const NAMES: readonly string[] = [
  'content-type',
  'location',
  'etag',
  'x-powered-by',
  'cache-control',
  'vary',
  'content-language',
  'content-location',
  'last-modified',
  'content-disposition',
  'content-encoding',
  'expires',
  'pragma',
];
const VALUES: readonly string[] = [
  'application/json; charset=utf-8',
  'application/json',
  'Express',
  'application/problem+json',
  'text/plain; charset=utf-8',
  'text/html; charset=utf-8',
  'no-store',
  'no-cache',
  'Origin',
  'Accept-Encoding',
  'en',
];
const NAME_CODES = new Map(NAMES.map((name, index) => [name, index + 1]));
const VALUE_CODES = new Map(VALUES.map((value, index) => [value, index + 1]));

const ARRAY_ELEMENT = 0x80;
const CODE_BITS = 0x7f;
const LITERAL = 0;
const MAX_NAME_BYTES = 0xff;
const MAX_VALUE_BYTES = 0xffff;

type Headers = Record<string, string | string[]>;

/** A lone surrogate: UTF-8 cannot hold it (it would come back as U+FFFD); JSON escapes it. */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * `headers` in the compact form, or undefined when one does not fit it (a name over 255 bytes or
 * a value over 65,535 bytes of UTF-8, a lone surrogate, or an empty array): such a response keeps
 * its JSON headers.
 */
export function encodeCompactHeaders(headers: Readonly<Headers>): Buffer | undefined {
  // Two passes, sizes then bytes: one allocation per record.
  let length = 0;
  for (const name of Object.keys(headers)) {
    const value = headers[name]!;
    const elements = Array.isArray(value) ? value : [value];
    if (elements.length === 0) return undefined;
    // A literal name costs its length byte even when it is empty: `''` is not a table entry.
    const literalName = !NAME_CODES.has(name);
    const nameBytes = literalName ? Buffer.byteLength(name, 'utf8') : 0;
    if (nameBytes > MAX_NAME_BYTES || (literalName && LONE_SURROGATE.test(name))) return undefined;
    for (const element of elements) {
      length += literalName ? 3 + nameBytes : 2;
      if (VALUE_CODES.has(element)) continue;
      const valueBytes = Buffer.byteLength(element, 'utf8');
      if (valueBytes > MAX_VALUE_BYTES || LONE_SURROGATE.test(element)) return undefined;
      length += 2 + valueBytes;
    }
  }
  const out = Buffer.allocUnsafe(length);
  let at = 0;
  for (const name of Object.keys(headers)) {
    const value = headers[name]!;
    const flag = Array.isArray(value) ? ARRAY_ELEMENT : 0;
    const nameCode = NAME_CODES.get(name);
    for (const element of Array.isArray(value) ? value : [value]) {
      if (nameCode !== undefined) {
        out[at++] = flag | nameCode;
      } else {
        out[at++] = flag | LITERAL;
        const written = out.write(name, at + 1, 'utf8');
        out[at] = written;
        at += 1 + written;
      }
      const valueCode = VALUE_CODES.get(element);
      if (valueCode !== undefined) {
        out[at++] = valueCode;
        continue;
      }
      out[at++] = LITERAL;
      const written = out.write(element, at + 2, 'utf8');
      out.writeUInt16BE(written, at);
      at += 2 + written;
    }
  }
  return out;
}

/** Inverse of {@link encodeCompactHeaders}. Throws a RangeError on bytes it did not write. */
export function decodeCompactHeaders(bytes: Buffer): Headers {
  // A Map, then own properties: a header may be named `__proto__`.
  const headers = new Map<string, string | string[]>();
  let at = 0;
  const take = (count: number) => {
    if (at + count > bytes.length) throw new RangeError('compact headers end inside an entry');
    const slice = bytes.subarray(at, at + count);
    at += count;
    return slice;
  };
  while (at < bytes.length) {
    const nameByte = take(1)[0]!;
    const nameCode = nameByte & CODE_BITS;
    let name: string;
    if (nameCode === LITERAL) name = take(take(1)[0]!).toString('utf8');
    else name = known(NAMES, nameCode, 'header name');
    const valueCode = take(1)[0]!;
    const value =
      valueCode === LITERAL ? take(take(2).readUInt16BE(0)).toString('utf8') : known(VALUES, valueCode, 'value');
    const existing = headers.get(name);
    if ((nameByte & ARRAY_ELEMENT) === 0) {
      if (existing !== undefined) throw new RangeError('compact headers name a header twice');
      headers.set(name, value);
    } else if (existing === undefined) {
      headers.set(name, [value]);
    } else if (Array.isArray(existing)) {
      existing.push(value);
    } else {
      throw new RangeError('compact headers name a header twice');
    }
  }
  return Object.fromEntries(headers);
}

function known(table: readonly string[], code: number, what: string): string {
  const entry = table[code - 1];
  if (entry === undefined) throw new RangeError(`compact headers with an unknown ${what} code ${code}`);
  return entry;
}
