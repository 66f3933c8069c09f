/**
 * The request fingerprint (docs/contract.md B.4): the digest assembled from the request's parts.
 * The one module to import for fingerprinting: it re-exports the input types and
 * `canonicalizeJson`.
 */
import { createHash } from 'node:crypto';
import { CanonicalEncoder } from './canonical-encoder.js';
import { mediaTypeEssence, readBody, writeBody } from './fingerprint-body.js';
import type { FingerprintInput } from './fingerprint-input.js';
import { readUrlencoded } from './urlencoded-pairs.js';

export { canonicalizeJson } from './canonical-json.js';
export type {
  FingerprintInput,
  JsonFingerprintMode,
  ParsedRequestBody,
  UploadedFileDigest,
} from './fingerprint-input.js';

const FINGERPRINT_VERSION = 'idempotency-fingerprint/v1';

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
 */
export async function computeFingerprint(input: FingerprintInput): Promise<string> {
  const mediaType = mediaTypeEssence(input.contentType);
  const body = await readBody(mediaType, input.contentType ?? '', input, input.json ?? 'lossless');

  const out = new CanonicalEncoder(FINGERPRINT_VERSION);
  out.text(input.method);
  out.text(input.routeTemplate);
  out.textMap(input.pathParams);
  if (input.query === '') out.count(0);
  else writeQuery(out, Buffer.from(input.query, 'utf8'));
  out.text(mediaType);
  writeBody(out, body);
  const headers = (input.headers ?? []).map(([name, value]): [string, string] => [name.toLowerCase(), value]);
  out.textPairs(headers.sort(byFirst));
  out.textMap(input.extra ?? {});
  return out.digest();
}

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

function byFirst(a: [string, unknown], b: [string, unknown]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}
