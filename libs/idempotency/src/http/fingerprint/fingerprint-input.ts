/**
 * The public shapes of the request fingerprint's input: what a caller passes to
 * `computeFingerprint()` and what a parsed body and an uploaded file look like in it.
 */

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
 */
export interface ParsedRequestBody {
  /** `request.body`: strings, numbers, booleans, null, buffers, arrays and plain objects. */
  fields: unknown;
  /** Uploaded files, in the order the upload interceptor lists them. @default [] */
  files?: UploadedFileDigest[];
}

/**
 * The parts of a request that decide whether a retry is "the same request" (docs/contract.md B.4 rule 14).
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
