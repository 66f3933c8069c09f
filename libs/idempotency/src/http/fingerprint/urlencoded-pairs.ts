import { isUtf8 } from 'node:buffer';

/**
 * One name or value of an `application/x-www-form-urlencoded` sequence as the fingerprint
 * compares it (docs/contract.md B.4 rule 14: decoded as the platform decodes it; where in doubt, the bytes).
 *
 * - `decoded`: the UTF-8 of the text percent-decoded as a whole, `+` being a space. This is what
 *   every supported parser hands the handler when all escapes are valid UTF-8.
 * - `raw`: the bytes as sent, when an escape is invalid or the bytes are not UTF-8. The parsers
 *   disagree there (qs and fast-querystring keep the whole text as sent, node:querystring decodes
 *   the valid escapes one by one, body-parser may read the body as latin1), so only identical
 *   bytes may compare equal: `%zz%41` and `%zzA` stay different.
 * - `segment`: a whole `name=value` sequence that qs splits at a `]=` after its first `=`, where
 *   the other parsers split at the first `=`: its bytes as sent.
 */
export interface UrlencodedToken {
  form: 'decoded' | 'raw' | 'segment';
  bytes: Buffer;
}

export type UrlencodedPair = [name: UrlencodedToken, value: UrlencodedToken];

/**
 * node:querystring (Express's default query parser) and qs (Express's `extended` query parser)
 * keep only the first 1000 `&`-separated sequences, empty ones included: above that, which
 * pairs a handler sees depends on their order, so the fingerprint digests the raw bytes.
 */
export const MAX_URLENCODED_SEQUENCES = 1000;

/**
 * Parses urlencoded bytes (a query string or a form body) into the pairs the fingerprint
 * compares, or returns `undefined` when only the raw bytes can be compared (more than
 * {@link MAX_URLENCODED_SEQUENCES} sequences).
 *
 * Decoding and order follow what the parsers a Nest application uses would hand the handler
 * (node:querystring and qs on Express, body-parser's qs for forms in UTF-8 or latin1,
 * fast-querystring on Fastify), so two inputs any of them parses differently never give the
 * same pairs:
 * - names and values are decoded per {@link UrlencodedToken};
 * - pairs are sorted by name root (the name up to its first `[`) with a stable sort: qs merges
 *   `a=1` and `a[b]=2` into one value whose shape depends on their order, so pairs of one root
 *   keep their order; names of different roots may come in any order (docs/contract.md B.4 rule 14);
 * - a name that starts with `[` (qs takes its root from inside the brackets), or a sequence qs
 *   splits elsewhere, keeps every pair in the order sent.
 * Empty sequences are skipped and `a` equals `a=`, as in all of these parsers.
 */
export function readUrlencoded(data: Buffer): UrlencodedPair[] | undefined {
  const entries: Array<{ pair: UrlencodedPair; root: Buffer }> = [];
  let keepOrder = false;
  let sequences = 0;
  let start = 0;
  while (start <= data.length) {
    let end = data.indexOf(AMPERSAND, start);
    if (end < 0) end = data.length;
    if (++sequences > MAX_URLENCODED_SEQUENCES) return undefined;
    if (end > start) {
      const sequence = data.subarray(start, end);
      const equals = sequence.indexOf(EQUALS);
      if (qsSplitsElsewhere(sequence, equals)) {
        keepOrder = true;
        entries.push({ pair: [{ form: 'segment', bytes: sequence }, EMPTY_TOKEN], root: EMPTY });
      } else {
        const name = tokenOf(equals < 0 ? sequence : sequence.subarray(0, equals));
        const value = equals < 0 ? EMPTY_TOKEN : tokenOf(sequence.subarray(equals + 1));
        const root = rootOf(name);
        if (root === undefined || (root.length === 0 && name.bytes.length > 0)) keepOrder = true;
        entries.push({ pair: [name, value], root: root ?? EMPTY });
      }
    }
    start = end + 1;
  }
  if (!keepOrder) entries.sort((a, b) => Buffer.compare(a.root, b.root));
  return entries.map(({ pair }) => pair);
}

const AMPERSAND = 0x26;
const EQUALS = 0x3d;
const PERCENT = 0x25;
const PLUS = 0x2b;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const EMPTY = Buffer.alloc(0);
const EMPTY_TOKEN: UrlencodedToken = { form: 'decoded', bytes: EMPTY };

function tokenOf(bytes: Buffer): UrlencodedToken {
  if (!isUtf8(bytes)) return { form: 'raw', bytes };
  if (bytes.indexOf(PERCENT) < 0 && bytes.indexOf(PLUS) < 0) return { form: 'decoded', bytes };
  try {
    const decoded = decodeURIComponent(bytes.toString('utf8').replaceAll('+', ' '));
    return { form: 'decoded', bytes: Buffer.from(decoded, 'utf8') };
  } catch {
    return { form: 'raw', bytes };
  }
}

/**
 * qs first turns every `%5B`/`%5D` into `[`/`]`, then splits a sequence at its first `]=` when
 * there is one, else at its first `=`.
 */
function qsSplitsElsewhere(sequence: Buffer, firstEquals: number): boolean {
  if (firstEquals < 0 || closesBracket(sequence, firstEquals)) return false;
  for (let i = sequence.indexOf(EQUALS, firstEquals + 1); i >= 0; i = sequence.indexOf(EQUALS, i + 1)) {
    if (closesBracket(sequence, i)) return true;
  }
  return false;
}

/** Whether the byte before `at` reads as `]` to qs (a `]` or a `%5D` escape). */
function closesBracket(data: Buffer, at: number): boolean {
  if (data[at - 1] === RBRACKET) return true;
  return at >= 3 && data[at - 3] === PERCENT && data[at - 2] === 0x35 && (data[at - 1] | 0x20) === 0x64;
}

/**
 * The root qs files a decoded name under: its bytes before the first `[`, or a coarser group
 * when qs would take the root from inside brackets. `undefined` for a name not decoded: qs in
 * UTF-8 and qs in latin1 then see different roots, so no grouping is safe for both.
 */
function rootOf(name: UrlencodedToken): Buffer | undefined {
  if (name.form !== 'decoded') return undefined;
  const bracket = name.bytes.indexOf(LBRACKET);
  return bracket < 0 ? name.bytes : name.bytes.subarray(0, bracket);
}
