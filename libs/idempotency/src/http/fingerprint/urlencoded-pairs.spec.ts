import fc from 'fast-check';
import { parse as fastQuerystringParse } from 'fast-querystring';
import { createRequire } from 'node:module';
import nodeQuerystring from 'node:querystring';
import { MAX_URLENCODED_SEQUENCES, readUrlencoded, type UrlencodedPair } from './urlencoded-pairs.js';

/** qs ships no types; it is the parser of Express's `extended` queries and of body-parser's forms. */
const qs = createRequire(import.meta.url)('qs') as { parse(text: string, options: object): unknown };

const read = (text: string | Buffer) => readUrlencoded(Buffer.isBuffer(text) ? text : Buffer.from(text, 'latin1'));
const show = (pairs: UrlencodedPair[] | undefined) =>
  pairs
    ?.map(([name, value]) => `${name.form}:${name.bytes.toString('hex')}=${value.form}:${value.bytes.toString('hex')}`)
    .join('&') ?? 'raw';
const same = (a: string | Buffer, b: string | Buffer) => show(read(a)) === show(read(b));

describe('readUrlencoded', () => {
  it('B.4 rule 14: decodes a value whose escapes are all valid UTF-8, "+" being a space', () => {
    expect(same('to=%41', 'to=A')).toBe(true);
    expect(same('to=a+b', 'to=a%20b')).toBe(true);
    expect(same('to=%C3%A9', Buffer.from('to=\u00e9', 'utf8'))).toBe(true);
    expect(read('to=%41')![0][1]).toEqual({ form: 'decoded', bytes: Buffer.from('A') });
  });

  it('B.4 rule 14: keeps a value with any invalid escape whole and as sent, as qs and fast-querystring do', () => {
    expect(same('to=%zz%41', 'to=%zzA')).toBe(false);
    expect(read('to=%zz%41')![0][1]).toEqual({ form: 'raw', bytes: Buffer.from('%zz%41') });
    expect(same('to=%FF', 'to=%FE')).toBe(false);
    expect(same('to=%', 'to=%25')).toBe(false);
    expect(same('to=a+%zz', 'to=a%20%zz')).toBe(false);
  });

  it('B.4 rule 15: bytes that are not UTF-8 are compared as sent', () => {
    expect(read(Buffer.from([0x61, 0x3d, 0xff]))![0][1]).toEqual({ form: 'raw', bytes: Buffer.from([0xff]) });
    expect(same(Buffer.from([0x61, 0x3d, 0xff]), 'a=%FF')).toBe(false);
  });

  it('B.4 rule 14: names of different roots may come in any order, values of one name keep theirs', () => {
    expect(same('b=1&a=2&c=3', 'a=2&c=3&b=1')).toBe(true);
    expect(same('a=1&b=x&a=2', 'b=x&a=1&a=2')).toBe(true);
    expect(same('a=1&a=2', 'a=2&a=1')).toBe(false);
  });

  it('B.4 rule 14: names of one root keep their order (qs nests a[b] under a, by order)', () => {
    expect(same('a=x&a[b]=y', 'a[b]=y&a=x')).toBe(false);
    expect(same('a[b]=1&z=2&a[c]=3', 'z=2&a[b]=1&a[c]=3')).toBe(true);
    expect(same('a%5Bb%5D=1', 'a[b]=1')).toBe(true);
  });

  it('B.4 rule 14: keeps the order sent where qs would take a root from inside brackets or split at a later "]="', () => {
    expect(same('[a]=1&a=2', 'a=2&[a]=1')).toBe(false);
    expect(same('a=b]=c&z=1', 'z=1&a=b]=c')).toBe(false);
    expect(same('a=b]=c', 'a=b%5D=c')).toBe(false);
    expect(read('a=b]=c')![0][0]).toEqual({ form: 'segment', bytes: Buffer.from('a=b]=c') });
    expect(same('%zz=1&a=2', 'a=2&%zz=1')).toBe(false);
  });

  it('B.4 rule 14: skips empty sequences; "a" equals "a="', () => {
    expect(same('&a=1&&b=2&', 'a=1&b=2')).toBe(true);
    expect(same('a', 'a=')).toBe(true);
    expect(read('')).toEqual([]);
  });

  it(`B.4 rule 14: above ${MAX_URLENCODED_SEQUENCES} sequences (empty ones included) only the raw bytes can be compared`, () => {
    expect(read('a=1&'.repeat(MAX_URLENCODED_SEQUENCES - 1) + 'a=1')).toHaveLength(MAX_URLENCODED_SEQUENCES);
    expect(read('a=1&'.repeat(MAX_URLENCODED_SEQUENCES))).toBeUndefined();
    expect(read('&'.repeat(MAX_URLENCODED_SEQUENCES))).toBeUndefined();
  });
});

/**
 * The parsers a Nest application hands the handler its query and form through. Two inputs with
 * the same pairs must parse to the same value under every one of them (members compared in any
 * order, as the fingerprint sorts names): otherwise a retry could replay another request's answer.
 */
const queryParsers: Record<string, (input: Buffer) => unknown> = {
  'Express query (node:querystring)': (input) => nodeQuerystring.parse(input.toString('latin1')),
  'Express extended query (qs)': (input) => qs.parse(input.toString('latin1'), { allowPrototypes: true }),
  'Fastify query (fast-querystring)': (input) => fastQuerystringParse(input.toString('latin1')),
};
const BODY_PARSER = { allowPrototypes: true, arrayLimit: 100, depth: 32, parameterLimit: 1000, strictDepth: true };
const formParsers: Record<string, (input: Buffer) => unknown> = {
  'body-parser UTF-8 form (qs)': (input) => qs.parse(input.toString('utf8'), { ...BODY_PARSER, charset: 'utf-8' }),
  'body-parser latin1 form (qs)': (input) =>
    qs.parse(input.toString('latin1'), { ...BODY_PARSER, charset: 'iso-8859-1' }),
  'Fastify form (fast-querystring, @fastify/formbody)': (input) => fastQuerystringParse(input.toString()),
};

const ASCII_TOKENS = [
  'a',
  'b',
  '=',
  '&',
  '+',
  'A',
  '%41',
  '%zz',
  '%',
  '%2',
  '%25',
  '%20',
  '[',
  ']',
  '%5D',
  '%5b',
  '%C3%A9',
  '%C3',
  '.',
];
const BYTE_TOKENS = [Buffer.from('\u00e9', 'utf8'), Buffer.from([0xff]), Buffer.from([0xc3]), Buffer.from(' ')];

function signature(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(signature).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const record = value as Record<string, unknown>;
    return `{${Object.keys(record)
      .sort()
      .map((name) => `${JSON.stringify(name)}:${signature(record[name])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

function parsedBy(parse: (input: Buffer) => unknown, input: Buffer): string {
  try {
    return signature(parse(input));
  } catch (error) {
    return `throws ${(error as Error).name}`;
  }
}

/** Records, per parser, the value each class of equal pairs parses to; returns the disagreements. */
function checker(parsers: Record<string, (input: Buffer) => unknown>) {
  const seen = new Map<string, { input: Buffer; values: string[] }>();
  const conflicts: string[] = [];
  return {
    conflicts,
    visit(input: Buffer): void {
      const key = show(readUrlencoded(input)) + (readUrlencoded(input) === undefined ? input.toString('hex') : '');
      const values = Object.values(parsers).map((parse) => parsedBy(parse, input));
      const first = seen.get(key);
      if (!first) {
        seen.set(key, { input, values });
        return;
      }
      Object.keys(parsers).forEach((name, i) => {
        if (first.values[i] !== values[i]) {
          conflicts.push(
            `${name}: ${JSON.stringify(first.input.toString('latin1'))} → ${first.values[i]} but ${JSON.stringify(input.toString('latin1'))} → ${values[i]}`,
          );
        }
      });
    },
  };
}

function everySequence(
  tokens: Buffer[],
  maxLength: number,
  visit: (input: Buffer) => void,
  prefix = Buffer.alloc(0),
): void {
  visit(prefix);
  if (maxLength === 0) return;
  for (const token of tokens) everySequence(tokens, maxLength - 1, visit, Buffer.concat([prefix, token]));
}

describe('readUrlencoded against the real parsers', () => {
  const ascii = ASCII_TOKENS.map((token) => Buffer.from(token, 'latin1'));

  it('B.4 rule 14: every query of up to 3 tokens with the same pairs parses the same under each query parser', () => {
    const check = checker(queryParsers);
    everySequence(ascii, 3, check.visit);
    expect(check.conflicts.slice(0, 5)).toEqual([]);
  });

  it('B.4 rule 15: every form body of up to 3 tokens (bytes that are not UTF-8 included) with the same pairs parses the same under each form parser', () => {
    const check = checker(formParsers);
    everySequence([...ascii, ...BYTE_TOKENS], 3, check.visit);
    expect(check.conflicts.slice(0, 5)).toEqual([]);
  });

  it('B.4 rules 14-15: a longer input rewritten without changing its pairs parses the same under every parser', () => {
    const sequence = fc
      .array(fc.constantFrom(...ascii, ...BYTE_TOKENS), { maxLength: 12 })
      .map((tokens) => Buffer.concat(tokens));
    // Rewrites that may keep the pairs: escape a character, change the case of hex digits,
    // swap "+" and "%20", add empty sequences, move a sequence elsewhere.
    const rewrite = (input: Buffer, seed: number): Buffer => {
      const text = input.toString('latin1');
      switch (seed % 5) {
        case 0: {
          const at = seed % Math.max(text.length, 1);
          const code = text.charCodeAt(at);
          return Number.isNaN(code)
            ? input
            : Buffer.from(`${text.slice(0, at)}%${code.toString(16).padStart(2, '0')}${text.slice(at + 1)}`, 'latin1');
        }
        case 1:
          return Buffer.from(
            text.replace(/%[0-9a-f]{2}/gi, (escape) => (seed & 8 ? escape.toLowerCase() : escape.toUpperCase())),
            'latin1',
          );
        case 2:
          return Buffer.from(seed & 8 ? text.replaceAll('+', '%20') : text.replaceAll('%20', '+'), 'latin1');
        case 3:
          return Buffer.from(`&${text}&&`, 'latin1');
        default: {
          const parts = text.split('&');
          const [moved] = parts.splice(seed % parts.length, 1);
          parts.splice((seed >> 3) % (parts.length + 1), 0, moved);
          return Buffer.from(parts.join('&'), 'latin1');
        }
      }
    };
    // A request target is ASCII (Node answers 400 to any other byte), so queries are only checked on ASCII.
    const parsersOf = (input: Buffer) =>
      input.every((byte) => byte < 0x80) ? { ...queryParsers, ...formParsers } : formParsers;
    fc.assert(
      fc.property(sequence, fc.array(fc.nat(), { minLength: 1, maxLength: 4 }), (input, seeds) => {
        const variant = seeds.reduce(rewrite, input);
        fc.pre(show(readUrlencoded(variant)) === show(readUrlencoded(input)) && readUrlencoded(input) !== undefined);
        for (const [name, parse] of Object.entries(parsersOf(input))) {
          expect(`${name}: ${parsedBy(parse, variant)}`).toBe(`${name}: ${parsedBy(parse, input)}`);
        }
      }),
      { numRuns: 3000 },
    );
  });
});
