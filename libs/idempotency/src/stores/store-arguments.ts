/**
 * The argument checks every store of this library runs (memory, Redis, TypeORM) before it touches
 * its storage, and the limits they enforce (@internal: not exported by the barrels). A bad
 * argument is a programming error, so they throw TypeError / RangeError, never
 * IdempotencyStoreError (which means "the store failed").
 */
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, ForceDeleteScope } from './idempotency-store.js';

/** 100 years: longer leases and TTLs are mistakes (and must fit the Redis record's 48-bit times). @internal */
export const MAX_DURATION_MS = 3_155_760_000_000;
/** Epoch ms below 2^48 (the year 10889), fencing tokens below 2^32: the Redis record's field sizes. */
const MAX_EPOCH_MS = 2 ** 48 - 1;
const MAX_FENCING_TOKEN = 2 ** 32 - 1;

/** @internal */
export function checkDuration(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0 || value > MAX_DURATION_MS) {
    throw new RangeError(`${name} must be a positive integer number of milliseconds (at most 100 years), got ${value}`);
  }
}

function checkText(name: string, value: string): void {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${name} must be a non-empty string`);
  }
}

/** Most records one `listInProgress` call returns: it is an inspection, not an export. */
export const MAX_LIST_LIMIT = 1_000;

/** @internal */
export function checkListArguments(olderThanMs: number, limit: number): void {
  if (!Number.isSafeInteger(olderThanMs) || olderThanMs < 0) {
    throw new RangeError(`olderThanMs must be a non-negative integer number of milliseconds, got ${olderThanMs}`);
  }
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) {
    throw new RangeError(`limit must be an integer from 1 to ${MAX_LIST_LIMIT}, got ${limit}`);
  }
}

/** @internal */
export function checkForceDeleteScope(scope: ForceDeleteScope): void {
  if (scope !== 'in-progress' && scope !== 'any') {
    throw new TypeError(`scope must be 'in-progress' or 'any', got ${String(scope)}`);
  }
}

/** @internal */
export function checkClaimRequest(request: ClaimRequest): void {
  checkText('ownerToken', request.ownerToken);
  checkText('fingerprint', request.fingerprint);
  checkDuration('leaseMs', request.leaseMs);
  checkDuration('ttlMs', request.ttlMs);
}

/** @internal */
export function checkResponse(response: StoredResponse): void {
  if (!Number.isInteger(response.statusCode) || response.statusCode < 100 || response.statusCode > 999) {
    throw new RangeError(`statusCode must be an integer from 100 to 999, got ${response.statusCode}`);
  }
  if (response.body !== undefined && !Buffer.isBuffer(response.body)) {
    throw new TypeError('body must be a Buffer');
  }
  if (typeof response.headers !== 'object' || response.headers === null || Array.isArray(response.headers)) {
    throw new TypeError('headers must be an object of header names to values');
  }
  for (const [name, value] of Object.entries(response.headers)) {
    if (typeof value !== 'string' && !(Array.isArray(value) && value.every((v) => typeof v === 'string'))) {
      throw new TypeError(`header ${JSON.stringify(name)} must be a string or an array of strings`);
    }
  }
}

/** @internal */
export function checkRecord(record: IdempotencyRecord): void {
  if (record.state !== 'in_progress' && record.state !== 'completed') {
    throw new TypeError(`state must be 'in_progress' or 'completed', got ${String(record.state)}`);
  }
  checkText('ownerToken', record.ownerToken);
  checkText('fingerprint', record.fingerprint);
  if (
    !Number.isSafeInteger(record.fencingToken) ||
    record.fencingToken < 1 ||
    record.fencingToken > MAX_FENCING_TOKEN
  ) {
    throw new RangeError(`fencingToken must be an integer from 1 to 2^32 - 1, got ${record.fencingToken}`);
  }
  for (const name of ['createdAtMs', 'leaseExpiresAtMs', 'expiresAtMs'] as const) {
    if (!Number.isSafeInteger(record[name]) || record[name] < 0 || record[name] > MAX_EPOCH_MS) {
      throw new RangeError(`${name} must be epoch ms from 0 to 2^48 - 1, got ${record[name]}`);
    }
  }
  if ((record.state === 'completed') !== (record.response !== undefined)) {
    throw new TypeError("A record has a response exactly when its state is 'completed'");
  }
  if (record.response) checkResponse(record.response);
}
