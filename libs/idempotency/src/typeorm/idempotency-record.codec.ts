/**
 * The TypeORM store's row codec (@internal: not exported by the entry point): what a row can
 * hold (arguments checked against the column sizes), and the strict reading of the rows and
 * row counts the database answers; anything unexpected is an `IdempotencyStoreError`.
 */
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type {
  IdempotencyRecord,
  IdempotencyRecordState,
  StoredResponse,
} from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, InProgressEntry } from '../stores/idempotency-store.js';
import { checkClaimRequest, checkResponse } from '../stores/store-arguments.js';
import { COMPLETED, IN_PROGRESS } from './idempotency-records.sql.js';

/** A row as the driver answers it, by column name. @internal */
export type Row = Record<string, unknown>;

/** Column lengths of the table (`varchar(64)`): SQLite does not enforce them, so the store does. */
const MAX_TEXT_LENGTH = 64;
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;

function checkText(name: string, value: unknown): void {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string`);
  }
  if (value.length > MAX_TEXT_LENGTH) {
    throw new RangeError(`${name} must be at most ${MAX_TEXT_LENGTH} characters, got ${value.length}`);
  }
  // MySQL stores these columns as `ascii` and compares them PAD SPACE ('k' = 'k '): a value it
  // would reject or merge with another is refused on every database, so the contract is one.
  if (!PRINTABLE_ASCII.test(value) || value.endsWith(' ')) {
    throw new TypeError(`${name} must be printable ASCII that does not end with a space`);
  }
}

export function checkKey(key: string): void {
  checkText('key (the scoped key id)', key);
}

export function checkToken(name: string, token: string): void {
  checkText(name, token);
}

export function checkRequest(request: ClaimRequest): void {
  checkClaimRequest(request);
  checkText('ownerToken', request.ownerToken);
  checkText('fingerprint', request.fingerprint);
}

export function checkStoredResponse(response: StoredResponse): void {
  checkResponse(response);
  if (!isHeaders(response.headers)) {
    throw new TypeError('headers must be an object whose values are strings or arrays of strings');
  }
}

function isHeaders(value: unknown): value is Record<string, string | string[]> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  return Object.values(value).every(
    (v) => typeof v === 'string' || (Array.isArray(v) && v.every((item) => typeof item === 'string')),
  );
}

export function single(rows: Row[]): Row {
  if (rows.length !== 1) throw unreadable(`a key matched ${rows.length} rows`);
  return rows[0];
}

/** True when the statement changed exactly one row (the key is the primary key: 0 or 1). */
export function changedOne(result: { affected?: number }): boolean {
  const count = affectedRows(result);
  if (count > 1) throw unreadable(`a guarded write changed ${count} rows`);
  return count === 1;
}

export function affectedRows(result: { affected?: number }): number {
  const count = result.affected;
  if (typeof count !== 'number' || !Number.isSafeInteger(count) || count < 0) {
    throw unreadable(`the driver reported ${String(count)} affected rows`);
  }
  return count;
}

function unreadable(detail: string): IdempotencyStoreError {
  return new IdempotencyStoreError(
    `Durable idempotency store: unreadable answer from the database (${detail}). The record is treated as ` +
      'unavailable: inspect the row in idempotency_records, repair or delete it.',
    'durable',
  );
}

function text(row: Row, column: string): string {
  const value = row[column];
  if (typeof value !== 'string' || value.length === 0) throw unreadable(`${column} is not a non-empty string`);
  return value;
}

/** `bigint` is a string on PostgreSQL and a number on SQLite; either must be a safe integer. */
export function integer(row: Row, column: string, min: number): number {
  const value = row[column];
  const parsed = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
  if (typeof parsed !== 'number' || !Number.isSafeInteger(parsed) || parsed < min) {
    throw unreadable(`${column} is ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`);
  }
  return parsed;
}

/** PostgreSQL `boolean` is a JS boolean; SQLite stores 0 / 1. */
function flag(row: Row, column: string): boolean {
  const value = row[column];
  if (value === true || value === 1) return true;
  if (value === false || value === 0) return false;
  throw unreadable(`${column} is ${String(value)}`);
}

function decodeHeaders(row: Row): Record<string, string | string[]> {
  const value = row.response_headers;
  if (typeof value !== 'string') throw unreadable('response_headers is not text');
  let headers: unknown;
  try {
    headers = JSON.parse(value);
  } catch {
    throw unreadable('response_headers is not JSON');
  }
  if (!isHeaders(headers)) throw unreadable('response_headers is not an object of strings and string arrays');
  return headers;
}

function decodeBody(row: Row): Buffer | undefined {
  const value = row.response_body;
  if (value === null) return undefined;
  // node-postgres answers a Buffer, sql.js a Uint8Array: copy either into a Buffer of our own.
  if (value instanceof Uint8Array) return Buffer.from(value);
  throw unreadable('response_body is not bytes');
}

function isState(value: unknown): value is IdempotencyRecordState {
  return value === IN_PROGRESS || value === COMPLETED;
}

export function decodeRecord(row: Row): IdempotencyRecord {
  const state = row.state;
  if (!isState(state)) throw unreadable(`state is ${JSON.stringify(state)}`);
  const record: IdempotencyRecord = {
    state,
    fingerprint: text(row, 'fingerprint'),
    ownerToken: text(row, 'owner_token'),
    fencingToken: integer(row, 'fencing_token', 1),
    createdAtMs: integer(row, 'created_at_ms', 0),
    leaseExpiresAtMs: integer(row, 'lease_expires_at_ms', 0),
    expiresAtMs: integer(row, 'expires_at_ms', 0),
  };
  const omitted = flag(row, 'response_body_omitted');
  if (state === IN_PROGRESS) {
    if (row.response_status !== null || row.response_headers !== null || row.response_body !== null || omitted) {
      throw unreadable('an in-progress row holds a response');
    }
    return record;
  }
  const statusCode = integer(row, 'response_status', 100);
  if (statusCode > 999) throw unreadable(`response_status is ${statusCode}`);
  const body = decodeBody(row);
  record.response = {
    statusCode,
    headers: decodeHeaders(row),
    ...(body !== undefined && { body }),
    ...(omitted && { bodyOmitted: true }),
  };
  return record;
}

/** The one row of a key with the database's clock it was read by (`now_ms`), or undefined when there is none. */
export function recordWithClock(rows: Row[]): { record: IdempotencyRecord; nowMs: number } | undefined {
  if (rows.length === 0) return undefined;
  const row = single(rows);
  return { record: decodeRecord(row), nowMs: integer(row, 'now_ms', 0) };
}

/** The listing entry of a row (with the database's clock it was read by), or undefined when the row cannot be read. */
export function readableEntry(row: Row): InProgressEntry | undefined {
  try {
    return { key: text(row, 'key'), record: decodeRecord(row), nowMs: integer(row, 'now_ms', 0) };
  } catch (error) {
    if (error instanceof IdempotencyStoreError) return undefined;
    throw error;
  }
}
