import fc from 'fast-check';
import { canonicalizeJson, computeFingerprint, type FingerprintInput } from './fingerprint.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** JSON values as `JSON.parse` returns them (no -0: JSON writes it as 0). */
const json: fc.Arbitrary<Json> = fc
  .jsonValue({ maxDepth: 4, noUnicodeString: false })
  .map((v) => JSON.parse(JSON.stringify(v)) as Json);
const object = fc.dictionary(fc.string({ maxLength: 6 }), json, { minKeys: 1, maxKeys: 6 });

/** The reference canonical form: members sorted by UTF-16 code units, JSON.stringify's escaping and numbers. */
function reference(value: Json): string {
  if (Array.isArray(value)) return `[${value.map(reference).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const names = Object.keys(value).sort();
    return `{${names.map((name) => `${JSON.stringify(name)}:${reference(value[name])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The same document written differently: members in another order, other whitespace. */
function rewrite(value: Json, seed: number, indent: number): string {
  const reorder = (v: Json, depth: number): Json => {
    if (Array.isArray(v)) return v.map((item) => reorder(item, depth + 1));
    if (v === null || typeof v !== 'object') return v;
    const names = Object.keys(v);
    // A deterministic shuffle per seed and depth (integer-like names keep JS's own order anyway).
    const shuffled = names
      .map((name, i) => ({ name, rank: ((i + 1) * 2654435761 + seed * 40503 + depth) % 1000003 }))
      .sort((a, b) => a.rank - b.rank)
      .map(({ name }) => name);
    return Object.fromEntries(shuffled.map((name) => [name, reorder(v[name], depth + 1)]));
  };
  return JSON.stringify(reorder(value, 0), null, indent);
}

/** Every path to a value inside `value` (the root excluded). */
function paths(value: Json, prefix: Array<string | number> = []): Array<Array<string | number>> {
  if (value === null || typeof value !== 'object') return [];
  const entries: Array<[string | number, Json]> = Array.isArray(value)
    ? value.map((v, i) => [i, v])
    : Object.entries(value);
  return entries.flatMap(([step, child]) => [[...prefix, step], ...paths(child, [...prefix, step])]);
}

function replaceAt(value: Json, path: Array<string | number>, replacement: Json): Json {
  if (path.length === 0) return replacement;
  const [step, ...rest] = path;
  if (Array.isArray(value)) return value.map((item, i) => (i === step ? replaceAt(item, rest, replacement) : item));
  const record = value as Record<string, Json>;
  return Object.fromEntries(
    Object.entries(record).map(([name, child]) => [name, name === step ? replaceAt(child, rest, replacement) : child]),
  );
}

function getAt(value: Json, path: Array<string | number>): Json {
  return path.reduce<Json>((v, step) => (v as Record<string | number, Json>)[step], value);
}

const query = (list: Array<[string, string]>) =>
  list.map(([n, v]) => `${encodeURIComponent(n)}=${encodeURIComponent(v)}`).join('&');

const request = (body: string, overrides: Partial<FingerprintInput> = {}): FingerprintInput => ({
  method: 'POST',
  routeTemplate: '/orders/:id',
  pathParams: { id: '42' },
  query: '',
  contentType: 'application/json',
  body: Buffer.from(body, 'utf8'),
  ...overrides,
});

describe('canonicalizer and fingerprint properties', () => {
  it('canonicalizeJson equals the reference form, in both modes, for any JSON written by JSON.stringify', () => {
    fc.assert(
      fc.property(json, (value) => {
        const text = JSON.stringify(value);
        expect(canonicalizeJson(text, 'lossless')).toBe(reference(value));
        expect(canonicalizeJson(text, 'jcs')).toBe(reference(value));
      }),
    );
  });

  it('canonicalization is idempotent and keeps the value', () => {
    fc.assert(
      fc.property(json, fc.integer({ min: 0, max: 4 }), (value, indent) => {
        const canonical = canonicalizeJson(JSON.stringify(value, null, indent), 'lossless');
        expect(canonicalizeJson(canonical, 'lossless')).toBe(canonical);
        expect(JSON.parse(canonical)).toEqual(value);
      }),
    );
  });

  it('the same payload with members in any order and any whitespace has the same fingerprint', async () => {
    await fc.assert(
      fc.asyncProperty(object, fc.nat(), fc.integer({ min: 0, max: 4 }), async (value, seed, indent) => {
        const original = await computeFingerprint(request(JSON.stringify(value)));
        expect(await computeFingerprint(request(rewrite(value, seed, indent)))).toBe(original);
        expect(await computeFingerprint(request(rewrite(value, seed + 1, 0), { json: 'jcs' }))).toBe(
          await computeFingerprint(request(JSON.stringify(value), { json: 'jcs' })),
        );
      }),
      { numRuns: 200 },
    );
  });

  it('any change of a value anywhere in the payload changes the fingerprint', async () => {
    await fc.assert(
      fc.asyncProperty(
        object.chain((value) => fc.tuple(fc.constant(value), fc.constantFrom(...paths(value)), json)),
        async ([value, path, replacement]) => {
          fc.pre(reference(getAt(value, path)) !== reference(replacement));
          const changed = replaceAt(value, path, replacement);
          const before = await computeFingerprint(request(JSON.stringify(value)));
          expect(await computeFingerprint(request(JSON.stringify(changed)))).not.toBe(before);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('any change of the method, route, path parameters, query, media type or configured headers changes the fingerprint', async () => {
    const text = fc.string({ minLength: 1, maxLength: 8 });
    const part = fc.oneof(
      text.map((v) => ({ method: `POST${v}` })),
      text.map((v) => ({ routeTemplate: `/orders/:id/${v}` })),
      text.map((v) => ({ pathParams: { id: `42${v}` } })),
      text.map((v) => ({ query: `q=${encodeURIComponent(v)}` })),
      fc.constantFrom('text/plain', 'application/octet-stream').map((contentType) => ({ contentType })),
      text.map((v) => ({ headers: [['api-version', v]] as Array<[string, string]> })),
      text.map((v) => ({ extra: { principal: v } })),
    );
    await fc.assert(
      fc.asyncProperty(object, part, async (value, change) => {
        const body = JSON.stringify(value);
        expect(await computeFingerprint(request(body, change))).not.toBe(await computeFingerprint(request(body)));
      }),
      { numRuns: 200 },
    );
  });

  it('query parameters whose names have distinct roots (the name up to its first "[") may come in any order', async () => {
    const name = fc.string({ minLength: 1, maxLength: 5 }).filter((n) => !n.startsWith('['));
    const rootOf = ([n]: [string, string]) => n.split('[')[0];
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.tuple(name, fc.string({ maxLength: 5 })), { selector: rootOf, minLength: 2, maxLength: 5 }),
        async (pairs) => {
          const forward = await computeFingerprint(request('{}', { query: query(pairs) }));
          expect(await computeFingerprint(request('{}', { query: query([...pairs].reverse()) }))).toBe(forward);
        },
      ),
    );
  });

  it('query parameters of one root keep their order: qs merges a=1&a[b]=2 by order', async () => {
    const suffix = fc.string({ maxLength: 4 }).map((s) => `[${s}]`);
    await fc.assert(
      fc.asyncProperty(
        fc.string({ minLength: 1, maxLength: 4 }).filter((n) => !n.includes('[')),
        suffix,
        fc.string({ maxLength: 4 }),
        fc.string({ maxLength: 4 }),
        async (root, tail, a, b) => {
          const pairs: Array<[string, string]> = [
            [root, a],
            [`${root}${tail}`, b],
          ];
          const forward = await computeFingerprint(request('{}', { query: query(pairs) }));
          expect(await computeFingerprint(request('{}', { query: query([...pairs].reverse()) }))).not.toBe(forward);
        },
      ),
    );
  });
});
