/**
 * The Redis store's codec (@internal: not exported by the entry point): what fits the record
 * layout of redis-record-format.ts, a response as the scripts store it (flags, headers, body,
 * packed when that is smaller), and the checked decoding of the scripts' replies (10 fields).
 */
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, ClaimResult } from '../stores/idempotency-store.js';
import { checkClaimRequest } from '../stores/store-arguments.js';
import { decodeCompactHeaders, encodeCompactHeaders } from './compact-headers.js';
import { packResponse, PACK_ABOVE_BYTES, unpackResponse } from './response-packing.js';

/** Record flags (the value layout of redis-record-format.ts). */
export const COMPLETED = 1;
const BODY_OMITTED = 2;
const HAS_BODY = 4;
/** Headers and body are stored compressed in the body field (see response-packing.ts). */
const PACKED = 8;
/** The headers field holds the compact form of compact-headers.ts instead of JSON. */
const COMPACT_HEADERS = 16;
const MAX_FLAGS = COMPLETED | BODY_OMITTED | HAS_BODY | PACKED | COMPACT_HEADERS;

/** Record fields in a script reply (see redis-record-format.ts). */
const RECORD_FIELDS = 10;
/** Fingerprints and owner tokens have a 2-byte length in the record layout. */
const MAX_TEXT_BYTES = 0xffff;

/** @internal */
export function checkTextBytes(name: string, value: string): void {
  if (Buffer.byteLength(value, 'utf8') > MAX_TEXT_BYTES) {
    throw new RangeError(`${name} must be at most ${MAX_TEXT_BYTES} bytes of UTF-8`);
  }
}

/** @internal */
export function checkRequest(request: ClaimRequest): void {
  checkClaimRequest(request);
  checkTextBytes('ownerToken', request.ownerToken);
  checkTextBytes('fingerprint', request.fingerprint);
}

/**
 * The record forms a store writes (it reads every form either way). `compact`: responses of at
 * most `PACK_ABOVE_BYTES` stored as they are with compact headers (flag 16), larger ones
 * compressed. `compatible`: only what 0.1.0 and earlier read (flags ≤ 15): headers as JSON,
 * compressed together with the body whenever that is smaller.
 */
export type RecordFormat = 'compact' | 'compatible';

/** @internal */
export function checkRecordFormat(format: unknown): RecordFormat {
  if (format !== 'compact' && format !== 'compatible') {
    throw new TypeError(`recordFormat must be 'compact' or 'compatible', got ${JSON.stringify(format)}`);
  }
  return format;
}

/**
 * A response as the scripts store it: flags, headers and body. In the `compact` format, headers
 * and body of more than `PACK_ABOVE_BYTES` are compressed together when that is smaller; below,
 * compressing costs more CPU than the bytes it saves are worth, and the headers take their
 * compact form instead. The `compatible` format never uses the compact form (see RecordFormat).
 */
export function encodeResponse(
  response: StoredResponse,
  format: RecordFormat = 'compact',
): {
  flags: number;
  headers: Buffer | string;
  body: Buffer | string;
} {
  const flags = (response.bodyOmitted === true ? BODY_OMITTED : 0) | (response.body !== undefined ? HAS_BODY : 0);
  const body = response.body ?? '';
  const compact = format === 'compact' ? encodeCompactHeaders(response.headers) : undefined;
  if (compact && compact.length + body.length <= PACK_ABOVE_BYTES) {
    return { flags: flags | COMPACT_HEADERS, headers: compact, body };
  }
  const headers = JSON.stringify(response.headers);
  const packed = packResponse(headers, response.body);
  if (packed) return { flags: flags | PACKED, headers: '', body: packed };
  return compact ? { flags: flags | COMPACT_HEADERS, headers: compact, body } : { flags, headers, body };
}

/* ------------------------------------------------------------------------------------------------
 * Reply decoders, for the store and its tests (not part of the entry point): each checks
 * arity and types and throws IdempotencyStoreError on anything else. Messages describe a reply by
 * its shape, never by its content (it may hold a stored response).
 * --------------------------------------------------------------------------------------------- */

/** @internal */
export function decodeClaimReply(reply: unknown, context: string): ClaimResult {
  const values = expectArray(reply, 2 + RECORD_FIELDS, context);
  const kind = expectInteger(values[0], 'the claim kind', context);
  const nowMs = expectInteger(values[1], 'the server time', context);
  const record = decodeRecord(values, 2, context);
  if (kind === 1) return { kind: 'claimed', record };
  if (kind === 0) return { kind: 'existing', record, nowMs };
  throw unexpected(context, `claim kind ${kind} (expected 0 or 1)`);
}

/** @internal */
export function decodeGetReply(reply: unknown, context: string): IdempotencyRecord | undefined {
  if (reply === null) return undefined;
  return decodeRecord(expectArray(reply, RECORD_FIELDS, context), 0, context);
}

/** @internal */
export function decodeFlagReply(reply: unknown, context: string): boolean {
  if (reply === 1) return true;
  if (reply === 0) return false;
  throw unexpected(context, `${describe(reply)} (expected the integer 0 or 1)`);
}

/** @internal The reply of the `inProgress` script: `{nowMs, <record>}`, or nil. */
export function decodeInProgressReply(
  reply: unknown,
  context: string,
): { record: IdempotencyRecord; nowMs: number } | undefined {
  if (reply === null) return undefined;
  const values = expectArray(reply, 1 + RECORD_FIELDS, context);
  const nowMs = expectInteger(values[0], 'the server time', context);
  return { record: decodeRecord(values, 1, context), nowMs };
}

function decodeRecord(values: readonly unknown[], at: number, context: string): IdempotencyRecord {
  const flags = expectInteger(values[at], 'the record flags', context);
  const fencingToken = expectInteger(values[at + 1], 'the fencing token', context);
  const createdAtMs = expectInteger(values[at + 2], 'createdAtMs', context);
  const leaseExpiresAtMs = expectInteger(values[at + 3], 'leaseExpiresAtMs', context);
  const expiresAtMs = expectInteger(values[at + 4], 'expiresAtMs', context);
  const statusCode = expectInteger(values[at + 5], 'the status code', context);
  const fingerprint = expectBytes(values[at + 6], 'the fingerprint', context).toString('utf8');
  const ownerToken = expectBytes(values[at + 7], 'the owner token', context).toString('utf8');
  let headers = expectBytes(values[at + 8], 'the headers', context);
  let body = expectBytes(values[at + 9], 'the body', context);
  if (flags < 0 || flags > MAX_FLAGS || (flags !== 0 && (flags & COMPLETED) === 0)) {
    throw unexpected(context, `record flags ${flags}`);
  }
  if (fencingToken < 1) throw unexpected(context, `fencing token ${fencingToken}`);
  const fields = { fingerprint, ownerToken, fencingToken, createdAtMs, leaseExpiresAtMs, expiresAtMs };
  if (flags === 0) {
    if (statusCode !== 0 || headers.length > 0 || body.length > 0) {
      throw unexpected(context, 'an in-progress record that carries a response');
    }
    return { state: 'in_progress', ...fields };
  }
  if ((flags & PACKED) !== 0) {
    if (headers.length > 0) throw unexpected(context, 'headers beside a packed response');
    if ((flags & COMPACT_HEADERS) !== 0) throw unexpected(context, 'compact headers inside a packed response');
    try {
      ({ headers, body } = unpackResponse(body));
    } catch {
      throw unexpected(context, 'a packed response that does not unpack');
    }
  }
  if ((flags & HAS_BODY) === 0 && body.length > 0) throw unexpected(context, 'body bytes on a record without a body');
  if (statusCode < 100 || statusCode > 999) throw unexpected(context, `status code ${statusCode}`);
  return {
    state: 'completed',
    ...fields,
    response: {
      statusCode,
      headers: (flags & COMPACT_HEADERS) !== 0 ? compactHeaders(headers, context) : parseHeaders(headers, context),
      // A copy: the reply's Buffer may be a view into a larger socket chunk.
      ...((flags & HAS_BODY) !== 0 && { body: Buffer.from(body) }),
      ...((flags & BODY_OMITTED) !== 0 && { bodyOmitted: true }),
    },
  };
}

function compactHeaders(raw: Buffer, context: string): Record<string, string | string[]> {
  try {
    return decodeCompactHeaders(raw);
  } catch {
    throw unexpected(context, 'stored compact headers that do not decode');
  }
}

function parseHeaders(raw: Buffer, context: string): Record<string, string | string[]> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw unexpected(context, 'stored headers that are not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw unexpected(context, 'stored headers that are not a JSON object');
  }
  for (const value of Object.values(parsed)) {
    const valid = typeof value === 'string' || (Array.isArray(value) && value.every((v) => typeof v === 'string'));
    if (!valid) throw unexpected(context, 'a stored header value that is neither a string nor an array of strings');
  }
  return parsed as Record<string, string | string[]>;
}

function expectArray(reply: unknown, length: number, context: string): readonly unknown[] {
  if (!Array.isArray(reply) || reply.length !== length) {
    throw unexpected(context, `${describe(reply)} (expected an array of ${length})`);
  }
  return reply;
}

function expectInteger(value: unknown, what: string, context: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw unexpected(context, `${describe(value)} as ${what} (expected an integer)`);
  }
  return value;
}

function expectBytes(value: unknown, what: string, context: string): Buffer {
  if (!Buffer.isBuffer(value)) throw unexpected(context, `${describe(value)} as ${what} (expected a bulk string)`);
  return value;
}

function describe(value: unknown): string {
  if (value === null) return 'nil';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (Buffer.isBuffer(value)) return `a bulk string of ${value.length} bytes`;
  if (typeof value === 'number') return Number.isInteger(value) ? `the integer ${value}` : 'a non-integer number';
  return `a ${typeof value}`;
}

function unexpected(context: string, what: string): IdempotencyStoreError {
  return new IdempotencyStoreError(
    `Unexpected reply from Redis to ${context}: ${what}. The store reads only what its own scripts answer: make sure ` +
      'nothing between the store and Redis rewrites replies, and that one version of this library uses the prefix.',
  );
}
