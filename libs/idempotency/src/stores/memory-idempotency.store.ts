import type { OnApplicationShutdown } from '@nestjs/common';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  IdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
  type ForceDeleteScope,
  type InProgressEntry,
} from './idempotency-store.js';

/**
 * Options of {@link MemoryIdempotencyStore}.
 *
 * @publicApi
 */
export interface MemoryIdempotencyStoreOptions {
  /**
   * How often expired records are removed from memory, in ms. Reads ignore an expired record
   * whether or not it was swept yet (docs/contract.md B.10 rule 30).
   * @default 60_000
   */
  sweepIntervalMs?: number;
}

const DEFAULT_SWEEP_INTERVAL_MS = 60_000;

/**
 * The fast-tier contract in one process, with `Date.now()` as its clock: for tests, development
 * and single-instance services (records do not survive a restart, docs/contract.md B.10 rule 31).
 *
 * - Every operation is atomic: it runs synchronously between two awaits.
 * - Records are copied in and out: mutating a record (or its body) you passed or got back never
 *   changes what the store holds.
 * - Expiry is enforced on read; a timer (unref'd, running only while records exist, stopped on
 *   shutdown) sweeps expired records so memory does not grow.
 * - `waitForChange` wakes in-process waiters on `complete`, `release` and `takeOver`.
 *
 * @example
 * IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore({ sweepIntervalMs: 10_000 }) })
 * @publicApi
 */
export class MemoryIdempotencyStore extends IdempotencyStore implements OnApplicationShutdown {
  private readonly records = new Map<string, IdempotencyRecord>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly sweepIntervalMs: number;
  private sweepTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    super();
    const sweepIntervalMs = options.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS;
    if (!Number.isFinite(sweepIntervalMs) || sweepIntervalMs <= 0) {
      throw new RangeError(`sweepIntervalMs must be a positive number of milliseconds, got ${sweepIntervalMs}`);
    }
    this.sweepIntervalMs = sweepIntervalMs;
  }

  /** Number of records held, including expired ones not swept yet (for metrics and tests). */
  get size(): number {
    return this.records.size;
  }

  async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    checkClaimRequest(request);
    const now = Date.now();
    const existing = this.live(key, now);
    if (existing) return { kind: 'existing', record: copyRecord(existing), nowMs: now };
    const record = newRecord(request, now);
    this.write(key, record);
    return { kind: 'claimed', record: copyRecord(record) };
  }

  async takeOver(key: string, expectedOwnerToken: string, request: ClaimRequest): Promise<ClaimResult> {
    checkClaimRequest(request);
    const now = Date.now();
    const existing = this.live(key, now);
    if (!existing) {
      const record = newRecord(request, now);
      this.write(key, record);
      return { kind: 'claimed', record: copyRecord(record) };
    }
    if (!ownedInProgress(existing, expectedOwnerToken) || existing.leaseExpiresAtMs > now) {
      return { kind: 'existing', record: copyRecord(existing), nowMs: now };
    }
    const record: IdempotencyRecord = {
      ...existing,
      ownerToken: request.ownerToken,
      fingerprint: request.fingerprint,
      fencingToken: existing.fencingToken + 1,
      leaseExpiresAtMs: now + request.leaseMs,
      expiresAtMs: now + request.ttlMs,
    };
    this.write(key, record);
    this.notify(key);
    return { kind: 'claimed', record: copyRecord(record) };
  }

  async complete(key: string, ownerToken: string, response: StoredResponse): Promise<boolean> {
    checkResponse(response);
    const existing = this.live(key, Date.now());
    if (!ownedInProgress(existing, ownerToken)) return false;
    this.write(key, { ...existing, state: 'completed', response: copyResponse(response) });
    this.notify(key);
    return true;
  }

  async release(key: string, ownerToken: string): Promise<boolean> {
    const existing = this.live(key, Date.now());
    if (!ownedInProgress(existing, ownerToken)) return false;
    this.records.delete(key);
    this.notify(key);
    return true;
  }

  async extend(key: string, ownerToken: string, leaseMs: number): Promise<boolean> {
    checkDuration('leaseMs', leaseMs);
    const now = Date.now();
    const existing = this.live(key, now);
    if (!ownedInProgress(existing, ownerToken)) return false;
    const leaseExpiresAtMs = now + leaseMs;
    // A live claim outlives its TTL: the record must not expire under a running handler.
    this.write(key, { ...existing, leaseExpiresAtMs, expiresAtMs: Math.max(existing.expiresAtMs, leaseExpiresAtMs) });
    return true;
  }

  async get(key: string): Promise<IdempotencyRecord | undefined> {
    const record = this.live(key, Date.now());
    return record && copyRecord(record);
  }

  /** Also returns false, writing nothing, when `record` is already expired. */
  async restore(key: string, record: IdempotencyRecord): Promise<boolean> {
    checkRecord(record);
    const now = Date.now();
    if (this.live(key, now) || record.expiresAtMs <= now) return false;
    this.write(key, copyRecord(record));
    return true;
  }

  /** Oldest first. */
  override async listInProgress(olderThanMs: number, limit: number): Promise<InProgressEntry[]> {
    checkListArguments(olderThanMs, limit);
    const now = Date.now();
    const entries: InProgressEntry[] = [];
    for (const key of [...this.records.keys()]) {
      const record = this.live(key, now);
      if (record?.state === 'in_progress' && now - record.createdAtMs >= olderThanMs) {
        entries.push({ key, record: copyRecord(record), nowMs: now });
      }
    }
    return entries.sort((a, b) => a.record.createdAtMs - b.record.createdAtMs).slice(0, limit);
  }

  override async forceDelete(key: string, scope: ForceDeleteScope = 'in-progress'): Promise<boolean> {
    checkForceDeleteScope(scope);
    const existing = this.live(key, Date.now());
    if (!existing || (scope === 'in-progress' && existing.state !== 'in_progress')) return false;
    this.records.delete(key);
    this.notify(key);
    return true;
  }

  /**
   * Resolves on the next `complete`, `release` or `takeOver` of `key`, or after `timeoutMs`.
   * Resolves at once when the record is no longer in progress (absent, expired or completed),
   * so a change between the caller's read and this call is never missed. Its timer never keeps
   * the process alive.
   */
  override waitForChange(key: string, timeoutMs: number): Promise<void> {
    const current = this.live(key, Date.now());
    if (this.closed || !(timeoutMs > 0) || current?.state !== 'in_progress') return Promise.resolve();
    return new Promise<void>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.removeWaiter(key, wake);
        resolve();
      };
      const timer = setTimeout(wake, timeoutMs);
      timer.unref();
      let waiting = this.waiters.get(key);
      if (!waiting) this.waiters.set(key, (waiting = new Set()));
      waiting.add(wake);
    });
  }

  /** Stops the sweep timer and wakes every waiter. Records stay readable. */
  onApplicationShutdown(): void {
    this.closed = true;
    this.stopSweeping();
    for (const key of [...this.waiters.keys()]) this.notify(key);
  }

  private live(key: string, now: number): IdempotencyRecord | undefined {
    const record = this.records.get(key);
    if (record && record.expiresAtMs <= now) {
      this.records.delete(key);
      return undefined;
    }
    return record;
  }

  /** `record` must not be shared with a caller (pass a fresh object or a copy). */
  private write(key: string, record: IdempotencyRecord): void {
    this.records.set(key, record);
    if (!this.sweepTimer && !this.closed) {
      this.sweepTimer = setInterval(() => this.sweep(), this.sweepIntervalMs);
      this.sweepTimer.unref();
    }
  }

  private sweep(): void {
    const now = Date.now();
    for (const [key, record] of this.records) {
      if (record.expiresAtMs <= now) this.records.delete(key);
    }
    if (this.records.size === 0) this.stopSweeping();
  }

  private stopSweeping(): void {
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.sweepTimer = undefined;
  }

  private notify(key: string): void {
    const waiting = this.waiters.get(key);
    if (waiting) for (const wake of [...waiting]) wake();
  }

  private removeWaiter(key: string, wake: () => void): void {
    const waiting = this.waiters.get(key);
    if (!waiting) return;
    waiting.delete(wake);
    if (waiting.size === 0) this.waiters.delete(key);
  }
}

function ownedInProgress(record: IdempotencyRecord | undefined, ownerToken: string): record is IdempotencyRecord {
  return record?.state === 'in_progress' && record.ownerToken === ownerToken;
}

function newRecord(request: ClaimRequest, now: number): IdempotencyRecord {
  return {
    state: 'in_progress',
    fingerprint: request.fingerprint,
    ownerToken: request.ownerToken,
    fencingToken: 1,
    createdAtMs: now,
    leaseExpiresAtMs: now + request.leaseMs,
    expiresAtMs: now + request.ttlMs,
  };
}

function copyResponse(response: StoredResponse): StoredResponse {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(response.headers)) {
    headers[name] = Array.isArray(value) ? [...value] : value;
  }
  return {
    statusCode: response.statusCode,
    headers,
    ...(response.body !== undefined && { body: Buffer.from(response.body) }),
    ...(response.bodyOmitted === true && { bodyOmitted: true }),
  };
}

function copyRecord(record: IdempotencyRecord): IdempotencyRecord {
  const { response, ...fields } = record;
  return response && record.state === 'completed' ? { ...fields, response: copyResponse(response) } : { ...fields };
}

/*
 * Argument checks shared by the stores of this library (@internal: not exported by the barrels).
 * A bad argument is a programming error, so they throw TypeError / RangeError, never
 * IdempotencyStoreError (which means "the store failed").
 */

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
  if (!Number.isSafeInteger(record.fencingToken) || record.fencingToken < 1 || record.fencingToken > MAX_FENCING_TOKEN) {
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
