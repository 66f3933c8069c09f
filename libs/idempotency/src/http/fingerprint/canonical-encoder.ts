/** The self-delimiting encoding of the fingerprint's parts, hashed once into its digest. */
import { hash } from 'node:crypto';
import type { UrlencodedPair } from './urlencoded-pairs.js';

const MAX_VALUE_DEPTH = 1000;

/**
 * Builds a self-delimiting string and hashes it once, as UTF-16 code units (injective even for
 * lone surrogates): every string is written as `<length>:<content>` and every list as `<count>;`
 * followed by its items, in a fixed order, so the stream parses back in exactly one way. Byte
 * strings are written one character per byte (latin1), which is injective too.
 */
export class CanonicalEncoder {
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
    if (depth > MAX_VALUE_DEPTH)
      throw new TypeError(`A parsed body nested deeper than ${MAX_VALUE_DEPTH} levels cannot be fingerprinted.`);
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
      const kind =
        typeof value === 'object'
          ? `an instance of ${value.constructor?.name ?? 'an unknown class'}`
          : `a ${typeof value}`;
      throw new TypeError(
        `A parsed body holding ${kind} cannot be fingerprinted: only strings, numbers, booleans, null, buffers, arrays and plain objects can.`,
      );
    }
  }

  /** SHA-256 of the encoding, base64url. One-shot `hash()`: a `Hash` object per request costs twice as much. */
  digest(): string {
    return hash('sha256', Buffer.from(this.out, 'utf16le'), 'base64url');
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
