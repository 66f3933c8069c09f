import { Logger, type OnApplicationShutdown } from '@nestjs/common';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import {
  IdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
  type ForceDeleteScope,
  type InProgressEntry,
} from './idempotency-store.js';
import { positiveInteger, recordBytes } from './memory-store-sizing.js';
import {
  checkClaimRequest,
  checkDuration,
  checkForceDeleteScope,
  checkListArguments,
  checkRecord,
  checkResponse,
} from './store-arguments.js';

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
  /**
   * Most records held. Past it, completed records are evicted, oldest first (their keys are
   * forgotten: a retry runs the handler again); in-progress records are never evicted, so a
   * store full of running requests holds more.
   * @default 100_000
   */
  maxEntries?: number;
  /**
   * Most bytes held, counting stored response bodies and headers plus a fixed overhead per
   * record; evicts like `maxEntries`.
   * @default 134_217_728 (128 MiB)
   */
  maxBytes?: number;
}

const DEFAULT_SWEEP_INTERVAL_MS = 60_000;
const DEFAULT_MAX_ENTRIES = 100_000;
const DEFAULT_MAX_BYTES = 128 * 1024 * 1024;

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
 * - Capped (`maxEntries`, `maxBytes`): past a cap, completed records are evicted oldest first,
 *   with one warning; in-progress records never are.
 *
 * @example
 * IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore({ sweepIntervalMs: 10_000, maxBytes: 32 * 1024 * 1024 }) })
 * @publicApi
 */
export class MemoryIdempotencyStore extends IdempotencyStore implements OnApplicationShutdown {
  private readonly records = new Map<string, IdempotencyRecord>();
  /** What each record counts for against `maxBytes`. */
  private readonly sizes = new Map<string, number>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly sweepIntervalMs: number;
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  private bytes = 0;
  private evicted = 0;
  private sweepTimer?: NodeJS.Timeout;
  private closed = false;

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    super();
    const sweepIntervalMs = options.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS;
    if (!Number.isFinite(sweepIntervalMs) || sweepIntervalMs <= 0) {
      throw new RangeError(`sweepIntervalMs must be a positive number of milliseconds, got ${sweepIntervalMs}`);
    }
    this.sweepIntervalMs = sweepIntervalMs;
    this.maxEntries = positiveInteger('maxEntries', options.maxEntries ?? DEFAULT_MAX_ENTRIES);
    this.maxBytes = positiveInteger('maxBytes', options.maxBytes ?? DEFAULT_MAX_BYTES);
  }

  /** Bytes held, as counted against `maxBytes`. */
  get sizeBytes(): number {
    return this.bytes;
  }

  /** Completed records evicted by the caps since the store was created. */
  get evictions(): number {
    return this.evicted;
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
    this.remove(key);
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
    this.remove(key);
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
      this.remove(key);
      return undefined;
    }
    return record;
  }

  /** `record` must not be shared with a caller (pass a fresh object or a copy). */
  private write(key: string, record: IdempotencyRecord): void {
    const size = recordBytes(key, record);
    this.bytes += size - (this.sizes.get(key) ?? 0);
    this.sizes.set(key, size);
    this.records.set(key, record);
    if (this.records.size > this.maxEntries || this.bytes > this.maxBytes) this.evictCompleted(key);
    if (!this.sweepTimer && !this.closed) {
      this.sweepTimer = setInterval(() => this.sweep(), this.sweepIntervalMs);
      this.sweepTimer.unref();
    }
  }

  private sweep(): void {
    const now = Date.now();
    for (const [key, record] of this.records) {
      if (record.expiresAtMs <= now) this.remove(key);
    }
    if (this.records.size === 0) this.stopSweeping();
  }

  private remove(key: string): void {
    this.bytes -= this.sizes.get(key) ?? 0;
    this.sizes.delete(key);
    this.records.delete(key);
  }

  /**
   * Evicts completed records, oldest claim first, until both caps hold, sparing `justWritten`:
   * an in-progress record is a running handler's claim, and forgetting it would let a duplicate run.
   */
  private evictCompleted(justWritten: string): void {
    let evictedNow = 0;
    for (const [key, record] of this.records) {
      if (this.records.size <= this.maxEntries && this.bytes <= this.maxBytes) break;
      if (record.state !== 'completed' || key === justWritten) continue;
      this.remove(key);
      evictedNow += 1;
    }
    if (evictedNow > 0 && this.evicted === 0) {
      new Logger('Idempotency').warn(
        `the memory store reached its cap (maxEntries ${this.maxEntries}, maxBytes ${this.maxBytes}) and evicts ` +
          'completed records, oldest first: a retry of an evicted key runs the handler again. Raise the caps, or ' +
          'use a shared store (RedisIdempotencyStore).',
      );
    }
    this.evicted += evictedNow;
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
