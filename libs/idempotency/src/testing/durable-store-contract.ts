import { createHash, randomBytes } from 'node:crypto';
import { IdempotencyClaimLostError } from '../errors/idempotency-claim-lost.error.js';
import { IdempotencyStoreError } from '../errors/idempotency-store.error.js';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { DurableIdempotencyStore, DurableTransaction } from '../stores/durable-idempotency-store.js';
import type { ClaimRequest } from '../stores/idempotency-store.js';
import { expect } from './contract-expect.js';
import { itEach, resolveRunner, type ContractTestRunner } from './contract-runner.js';
import { expectInspectionBasics, expectListingOldestFirst } from './inspection-checks.js';

/**
 * The durable-tier contract (`DurableIdempotencyStore`, DESIGN "Durable tier" and "The flow of one
 * request" steps 4, 6 and 7), as a suite any implementation must pass. Real timers and short
 * TTLs: leases and expiry are measured by the application's clock, never faked.
 *
 * @publicApi
 */
export interface DurableStoreUnderTest {
  /** A store on an empty table. */
  store: DurableIdempotencyStore;
  /**
   * Another store on the same database, as a second instance of the application would have one
   * (with its own options). Where one process owns the database (sql.js), it may share `store`'s
   * serialization or be `store` itself.
   */
  anotherInstance(options?: { lockTimeoutMs?: number }): DurableIdempotencyStore;
  /** Writes one row of a business table through the handle `transaction()` gave to its work. */
  writeBusinessRow(transaction: DurableTransaction, id: string): Promise<void>;
  /** Whether a business row was committed. Called only while no store operation runs. */
  businessRowExists(id: string): Promise<boolean>;
  /** Rows physically in the durable table, expired ones included. Called only while no store operation runs. */
  countRows(): Promise<number>;
  /** Overwrites stored columns of `key` so that the row is unreadable in the way `damage` names. */
  damage(key: string, damage: RowDamage): Promise<void>;
  /**
   * How the store keeps a takeover from running beside a live transaction: PostgreSQL row locks
   * (a takeover waits at most `lockTimeoutMs`, the value `anotherInstance` is given), or one
   * exclusive section for everything (SQLite).
   */
  locking: 'row-locks' | 'exclusive';
  /** Closes what the factory opened and removes the rows the test wrote. */
  cleanup(): Promise<void>;
}

/**
 * Ways a row can be unreadable that every SQL database can hold, each with what `transaction()`
 * answers for it: a row that is no longer `in_progress` under our token (a completed row, an
 * unknown state, a blank owner) is not ours to lock, so the claim is lost; a row that is ours
 * but unreadable is a store error.
 *
 * @publicApi
 */
export const ROW_DAMAGES = {
  'unknown state': 'claim-lost',
  'fencing token 0': 'store-error',
  'lease beyond 2^53 (not a safe integer)': 'store-error',
  'empty owner token': 'claim-lost',
  'in-progress row holding a response': 'store-error',
  'completed row whose headers are not JSON': 'claim-lost',
  'completed row whose headers are a JSON array': 'claim-lost',
  'completed row with status code 42': 'claim-lost',
} as const;
/** @publicApi */
export type RowDamage = keyof typeof ROW_DAMAGES;

/** Lifetimes short enough to watch expire, long enough for a claim and a write on a busy sql.js. */
const SHORT_MS = 100;
/** Long enough to outlive any test. */
const LONG_MS = 60_000;
/** Tolerance for timer granularity and a round trip to the database. */
const SLACK_MS = 50;

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A storage id shaped like `buildScopedKey().id` (32 hex characters). */
export const newId = (): string => randomBytes(16).toString('hex');
/** An owner token shaped like `newOwnerToken()` (22 base64url characters). */
export const newToken = (): string => randomBytes(16).toString('base64url');
/** A fingerprint shaped like the engine's (base64url SHA-256, 43 characters). */
export const newFingerprint = (): string => createHash('sha256').update(randomBytes(16)).digest('base64url');

export function claimRequest(overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { ownerToken: newToken(), fingerprint: newFingerprint(), leaseMs: LONG_MS, ttlMs: LONG_MS, ...overrides };
}

/** Bytes that are not valid UTF-8 (lone continuation bytes, an overlong form, a surrogate, NUL, CR LF). */
export const NON_UTF8_BODY = Buffer.from([0x00, 0xff, 0xfe, 0x80, 0xbf, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x0d, 0x0a, 0x7f]);

export function sampleResponse(overrides: Partial<StoredResponse> = {}): StoredResponse {
  return {
    statusCode: 201,
    headers: {
      'content-type': 'application/octet-stream',
      location: '/orders/8f14e45f-ceea-467f-a0e6-2f1a3b9c0d11',
      link: ['</a>; rel="a"', '</b, c>; rel="b"'],
      'x-empty': [],
      'content-disposition': 'attachment; filename="reçu ✓.pdf"',
      'x-quote': 'a "quoted" \\ value',
    },
    body: Buffer.from(NON_UTF8_BODY),
    ...overrides,
  };
}

/** A promise and the function that resolves it: lets a test wait for a point inside `work`. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire!: () => void;
  const promise = new Promise<void>((resolve) => (fire = resolve));
  return { promise, fire };
}

/** Work for `transaction()` that counts its calls (work that must never run is checked with it). */
function countedWork<T>(body: (transaction: DurableTransaction) => Promise<T>): {
  work: (transaction: DurableTransaction) => Promise<T>;
  calls: () => number;
} {
  let calls = 0;
  return {
    work: (transaction) => {
      calls += 1;
      return body(transaction);
    },
    calls: () => calls,
  };
}

async function elapsed<T>(action: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const start = performance.now();
  const value = await action();
  return { ms: performance.now() - start, value };
}

async function expectStoreError(promise: Promise<unknown>): Promise<IdempotencyStoreError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(IdempotencyStoreError);
  expect((error as IdempotencyStoreError).tier).toBe('durable');
  return error as IdempotencyStoreError;
}

/**
 * Registers the contract suite for one durable store. `make` runs before every test. `runner` is
 * your test runner's `describe`, `it`, `beforeEach` and `afterEach`; without it, its globals are used.
 *
 * @publicApi
 */
export function describeDurableStoreContract(
  name: string,
  make: () => Promise<DurableStoreUnderTest>,
  runner?: ContractTestRunner,
): void {
  const resolved = resolveRunner(runner);
  const { describe, it, beforeEach, afterEach } = resolved;
  describe(`DurableIdempotencyStore contract: ${name}`, () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    let cleanup: (() => Promise<void>) | undefined;

    beforeEach(async () => {
      h = await make();
      store = h.store;
      cleanup = h.cleanup;
    });
    afterEach(async () => {
      await cleanup?.();
      cleanup = undefined;
    });

    async function claimed(key: string, overrides: Partial<ClaimRequest> = {}): Promise<IdempotencyRecord> {
      const result = await store.claim(key, claimRequest(overrides));
      if (result.kind !== 'claimed') throw new Error(`expected a claim of ${key}, got ${result.kind}`);
      return result.record;
    }

    async function completed(key: string, response: StoredResponse = sampleResponse()): Promise<IdempotencyRecord> {
      const record = await claimed(key);
      expect(await store.complete(key, record.ownerToken, response)).toBe(true);
      const stored = await store.get(key);
      if (!stored) throw new Error(`record ${key} vanished after complete`);
      return stored;
    }

    describe('claim', () => {
      it('claims an absent key: in_progress, fencing token 1, lease and expiry from the request', async () => {
        const key = newId();
        const request = claimRequest({ leaseMs: 30_000, ttlMs: 86_400_000 });
        const before = Date.now();
        const result = await store.claim(key, request);
        const after = Date.now();
        expect(result.kind).toBe('claimed');
        const { record } = result;
        expect(record).toEqual({
          state: 'in_progress',
          fingerprint: request.fingerprint,
          ownerToken: request.ownerToken,
          fencingToken: 1,
          createdAtMs: record.createdAtMs,
          leaseExpiresAtMs: record.createdAtMs + 30_000,
          expiresAtMs: record.createdAtMs + 86_400_000,
        });
        expect('response' in record).toBe(false);
        expect(record.createdAtMs).toBeGreaterThanOrEqual(before);
        expect(record.createdAtMs).toBeLessThanOrEqual(after);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns an existing in-progress row unchanged, with the clock it decided by (nowMs)', async () => {
        const key = newId();
        const first = await claimed(key);
        const result = await store.claim(key, claimRequest());
        expect(result.kind).toBe('existing');
        if (result.kind !== 'existing') return;
        expect(result.record).toEqual(first);
        expect(result.nowMs).toBeGreaterThanOrEqual(first.createdAtMs);
        expect(result.nowMs).toBeLessThanOrEqual(Date.now());
        expect(await store.get(key)).toEqual(first);
      });

      it('returns an existing completed row with its response', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.claim(key, claimRequest())).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      });

      it('returns an in-progress row whose lease lapsed as existing (recovery is takeOver, not claim)', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const result = await store.claim(key, claimRequest());
        expect(result).toEqual({ kind: 'existing', record: first, nowMs: expect.any(Number) });
        if (result.kind === 'existing') expect(result.nowMs).toBeGreaterThanOrEqual(first.leaseExpiresAtMs);
      });

      it("replaces an expired in-progress row as if absent: new owner, fingerprint and times, fencing = the old row's + 1", async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS, ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const request = claimRequest({ leaseMs: 1_000, ttlMs: 5_000 });
        const result = await store.claim(key, request);
        expect(result.kind).toBe('claimed');
        const { record } = result;
        expect(record).toEqual({
          state: 'in_progress',
          fingerprint: request.fingerprint,
          ownerToken: request.ownerToken,
          fencingToken: 2,
          createdAtMs: record.createdAtMs,
          leaseExpiresAtMs: record.createdAtMs + 1_000,
          expiresAtMs: record.createdAtMs + 5_000,
        });
        expect(record.createdAtMs).toBeGreaterThanOrEqual(first.expiresAtMs);
        expect(await store.get(key)).toEqual(record);
        expect(await h.countRows()).toBe(1);
      });

      it('replaces an expired completed row and drops its response', async () => {
        const key = newId();
        const record = await claimed(key, { ttlMs: SHORT_MS });
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
        await sleep(SHORT_MS + 20);
        const result = await store.claim(key, claimRequest());
        expect(result.kind).toBe('claimed');
        expect(result.record.fencingToken).toBe(2);
        expect(result.record.response).toBeUndefined();
        expect((await store.get(key))?.response).toBeUndefined();
      });

      it('keeps counting fencing tokens over successive expiries', async () => {
        const key = newId();
        await claimed(key, { ttlMs: SHORT_MS });
        for (const expected of [2, 3]) {
          await sleep(SHORT_MS + 20);
          const result = await store.claim(key, claimRequest({ ttlMs: SHORT_MS }));
          expect(result.kind).toBe('claimed');
          expect(result.record.fencingToken).toBe(expected);
        }
      });

      it('fences the owner of an expired row out once the row is replaced', async () => {
        const key = newId();
        const zombie = await claimed(key, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const fresh = await claimed(key);
        expect(await store.complete(key, zombie.ownerToken, sampleResponse())).toBe(false);
        expect(await store.extend(key, zombie.ownerToken, LONG_MS)).toBe(false);
        expect(await store.release(key, zombie.ownerToken)).toBe(false);
        expect(await store.get(key)).toEqual(fresh);
      });

      it('gives exactly one of 30 concurrent claims of one key the row, across two instances', async () => {
        const key = newId();
        const other = h.anotherInstance();
        const results = await Promise.all(
          Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? store : other).claim(key, claimRequest())),
        );
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners).toHaveLength(1);
        for (const r of results) expect(r.record).toEqual(winners[0].record);
        expect(await h.countRows()).toBe(1);
      });

      it('gives exactly one of 30 concurrent claims of one expired key the row (fencing 2)', async () => {
        const key = newId();
        await claimed(key, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const other = h.anotherInstance();
        const results = await Promise.all(
          Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? store : other).claim(key, claimRequest())),
        );
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners).toHaveLength(1);
        expect(winners[0].record.fencingToken).toBe(2);
        for (const r of results) expect(r.record.ownerToken).toBe(winners[0].record.ownerToken);
      });

      it('keeps keys apart', async () => {
        const a = newId();
        await claimed(a);
        expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
        expect(await h.countRows()).toBe(2);
      });

      itEach(it)([
        ['leaseMs', 0],
        ['leaseMs', -1],
        ['leaseMs', 1.5],
        ['leaseMs', Number.NaN],
        ['ttlMs', 0],
        ['ttlMs', Number.POSITIVE_INFINITY],
      ])('rejects %s = %p with a RangeError and writes nothing', async (field, value) => {
        const key = newId();
        await expect(store.claim(key, claimRequest({ [field]: value }))).rejects.toThrow(RangeError);
        expect(await h.countRows()).toBe(0);
      });

      it('rejects an empty key, owner token or fingerprint with a TypeError', async () => {
        await expect(store.claim('', claimRequest())).rejects.toThrow(TypeError);
        await expect(store.claim(newId(), claimRequest({ ownerToken: '' }))).rejects.toThrow(TypeError);
        await expect(store.claim(newId(), claimRequest({ fingerprint: '' }))).rejects.toThrow(TypeError);
        expect(await h.countRows()).toBe(0);
      });

      it('rejects a key, owner token or fingerprint longer than its 64-character column with a RangeError', async () => {
        const long = 'k'.repeat(65);
        await expect(store.claim(long, claimRequest())).rejects.toThrow(RangeError);
        await expect(store.claim(newId(), claimRequest({ ownerToken: long }))).rejects.toThrow(RangeError);
        await expect(store.claim(newId(), claimRequest({ fingerprint: long }))).rejects.toThrow(RangeError);
        expect(await h.countRows()).toBe(0);
        expect((await store.claim('k'.repeat(64), claimRequest({ ownerToken: 'o'.repeat(64) }))).kind).toBe('claimed');
      });
    });

    describe('takeOver', () => {
      it('takes over a lapsed lease with the right token: new owner and fingerprint, fencing + 1, createdAt kept', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const request = claimRequest({ leaseMs: 5_000, ttlMs: 90_000 });
        const result = await h.anotherInstance().takeOver(key, first.ownerToken, request);
        expect(result.kind).toBe('claimed');
        const { record } = result;
        const now = record.leaseExpiresAtMs - 5_000;
        expect(record).toEqual({
          state: 'in_progress',
          fingerprint: request.fingerprint,
          ownerToken: request.ownerToken,
          fencingToken: 2,
          createdAtMs: first.createdAtMs,
          leaseExpiresAtMs: now + 5_000,
          expiresAtMs: now + 90_000,
        });
        expect(now).toBeGreaterThanOrEqual(first.leaseExpiresAtMs);
        expect(await store.get(key)).toEqual(record);
      });

      it('counts fencing tokens up over successive takeovers', async () => {
        const key = newId();
        let owner = (await claimed(key, { leaseMs: SHORT_MS })).ownerToken;
        for (const expected of [2, 3]) {
          await sleep(SHORT_MS + 20);
          const result = await store.takeOver(key, owner, claimRequest({ leaseMs: SHORT_MS }));
          expect(result.kind).toBe('claimed');
          expect(result.record.fencingToken).toBe(expected);
          owner = result.record.ownerToken;
        }
      });

      it('returns the row unchanged when the expected token is wrong', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const result = await store.takeOver(key, newToken(), claimRequest());
        expect(result).toEqual({ kind: 'existing', record: first, nowMs: expect.any(Number) });
        expect(await store.get(key)).toEqual(first);
      });

      it('refuses a live lease even with the right token (the owner renewed it)', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.extend(key, first.ownerToken, LONG_MS)).toBe(true);
        const renewed = await store.get(key);
        const result = await store.takeOver(key, first.ownerToken, claimRequest());
        expect(result).toEqual({ kind: 'existing', record: renewed, nowMs: expect.any(Number) });
        if (result.kind === 'existing') expect(result.nowMs).toBeLessThan(renewed!.leaseExpiresAtMs);
      });

      it('refuses a lease that never lapsed', async () => {
        const key = newId();
        const first = await claimed(key);
        const result = await store.takeOver(key, first.ownerToken, claimRequest());
        expect(result).toEqual({ kind: 'existing', record: first, nowMs: expect.any(Number) });
      });

      it('returns a completed row unchanged, even with the right token', async () => {
        const key = newId();
        const record = await completed(key);
        const result = await store.takeOver(key, record.ownerToken, claimRequest());
        expect(result).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      });

      it('claims an absent key as claim does (fencing token 1)', async () => {
        const key = newId();
        const request = claimRequest();
        const result = await store.takeOver(key, newToken(), request);
        expect(result.kind).toBe('claimed');
        expect(result.record).toMatchObject({ state: 'in_progress', ownerToken: request.ownerToken, fencingToken: 1 });
        expect(await store.get(key)).toEqual(result.record);
      });

      it("claims an expired key as claim does (fencing = the old row's + 1, new createdAt)", async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS, ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const result = await store.takeOver(key, first.ownerToken, claimRequest());
        expect(result.kind).toBe('claimed');
        expect(result.record.fencingToken).toBe(2);
        expect(result.record.createdAtMs).toBeGreaterThanOrEqual(first.expiresAtMs);
      });

      it('fences the old owner out: its complete, release and extend return false and change nothing', async () => {
        const key = newId();
        const zombie = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const taken = await store.takeOver(key, zombie.ownerToken, claimRequest());
        expect(taken.kind).toBe('claimed');
        expect(await store.complete(key, zombie.ownerToken, sampleResponse())).toBe(false);
        expect(await store.extend(key, zombie.ownerToken, LONG_MS)).toBe(false);
        expect(await store.release(key, zombie.ownerToken)).toBe(false);
        expect(await store.get(key)).toEqual(taken.record);
      });

      it('lets exactly one of 20 concurrent takeovers of one dead lease win, across two instances', async () => {
        const key = newId();
        const dead = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const other = h.anotherInstance();
        const results = await Promise.all(
          Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? store : other).takeOver(key, dead.ownerToken, claimRequest())),
        );
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners).toHaveLength(1);
        expect(winners[0].record.fencingToken).toBe(2);
        for (const r of results) expect(r.record.ownerToken).toBe(winners[0].record.ownerToken);
      });

      it('rejects an empty expected token with a TypeError and a bad lease with a RangeError', async () => {
        await expect(store.takeOver(newId(), '', claimRequest())).rejects.toThrow(TypeError);
        await expect(store.takeOver(newId(), newToken(), claimRequest({ leaseMs: 0 }))).rejects.toThrow(RangeError);
        expect(await h.countRows()).toBe(0);
      });
    });

    describe('complete', () => {
      it('stores status, headers (arrays too) and body bytes exactly, and keeps expiresAt and the claim fields', async () => {
        const key = newId();
        const record = await claimed(key, { ttlMs: 3_600_000 });
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
        const stored = await store.get(key);
        expect(stored).toEqual({ ...record, state: 'completed', response: sampleResponse() });
        expect(stored?.expiresAtMs).toBe(record.expiresAtMs);
        const body = stored?.response?.body;
        expect(Buffer.isBuffer(body)).toBe(true);
        expect(body?.equals(NON_UTF8_BODY)).toBe(true);
        expect(stored?.response?.headers.link).toEqual(['</a>; rel="a"', '</b, c>; rel="b"']);
        expect(stored?.response?.headers['x-empty']).toEqual([]);
        expect(stored?.response?.bodyOmitted).toBeUndefined();
      });

      it('stores an empty body as an empty Buffer, not as no body', async () => {
        const stored = await completed(newId(), sampleResponse({ statusCode: 200, body: Buffer.alloc(0) }));
        expect(Buffer.isBuffer(stored.response?.body)).toBe(true);
        expect(stored.response?.body).toHaveLength(0);
        expect(stored.response?.bodyOmitted).toBeUndefined();
      });

      it('stores a response without a body (a 204) with neither body nor bodyOmitted', async () => {
        const stored = await completed(newId(), { statusCode: 204, headers: {} });
        expect(stored.response).toEqual({ statusCode: 204, headers: {} });
        expect('body' in stored.response!).toBe(false);
        expect('bodyOmitted' in stored.response!).toBe(false);
      });

      it('stores bodyOmitted (a body too large or streamed) without a body', async () => {
        const stored = await completed(newId(), { statusCode: 201, headers: { location: '/x' }, bodyOmitted: true });
        expect(stored.response).toEqual({ statusCode: 201, headers: { location: '/x' }, bodyOmitted: true });
        expect(stored.response?.body).toBeUndefined();
      });

      it('stores every byte value, and a 1 MiB body of random bytes, exactly', async () => {
        const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
        expect((await completed(newId(), sampleResponse({ body: all }))).response?.body?.equals(all)).toBe(true);
        const random = randomBytes(1_048_576);
        expect((await completed(newId(), sampleResponse({ body: random }))).response?.body?.equals(random)).toBe(true);
      });

      it('hands out copies: mutating a returned body or headers changes nothing stored', async () => {
        const key = newId();
        const record = await completed(key);
        const copy = (await store.get(key))!;
        copy.response!.body![0] = 0x41;
        (copy.response!.headers.link as string[]).push('</c>');
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false and changes nothing for a non-owner', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.complete(key, newToken(), sampleResponse())).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for a row that is already completed, keeping the first response', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.complete(key, record.ownerToken, sampleResponse({ statusCode: 500 }))).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for an absent key and writes nothing', async () => {
        expect(await store.complete(newId(), newToken(), sampleResponse())).toBe(false);
        expect(await h.countRows()).toBe(0);
      });

      it('returns false once the row expired, and does not bring it back', async () => {
        const key = newId();
        const record = await claimed(key, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(false);
        expect(await store.get(key)).toBeUndefined();
      });

      it('completes after the lease lapsed when nobody took over (fencing is by token, not by time)', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
      });

      it('rejects a status code outside 100–999 with a RangeError and changes nothing', async () => {
        const key = newId();
        const record = await claimed(key);
        await expect(store.complete(key, record.ownerToken, sampleResponse({ statusCode: 42 }))).rejects.toThrow(RangeError);
        expect(await store.get(key)).toEqual(record);
      });

      it('rejects headers that are not strings or string arrays, and a body that is not a Buffer, with a TypeError', async () => {
        const key = newId();
        const record = await claimed(key);
        const badHeaders = { 'x-n': 1 } as unknown as StoredResponse['headers'];
        await expect(store.complete(key, record.ownerToken, sampleResponse({ headers: badHeaders }))).rejects.toThrow(TypeError);
        const badBody = 'text' as unknown as Buffer;
        await expect(store.complete(key, record.ownerToken, sampleResponse({ body: badBody }))).rejects.toThrow(TypeError);
        expect(await store.get(key)).toEqual(record);
      });
    });

    describe('release', () => {
      it('deletes the row of its owner, so the key can be claimed afresh (fencing token 1)', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.release(key, record.ownerToken)).toBe(true);
        expect(await store.get(key)).toBeUndefined();
        expect(await h.countRows()).toBe(0);
        expect((await claimed(key)).fencingToken).toBe(1);
      });

      it('returns false and keeps the row for a non-owner', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.release(key, newToken())).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('never deletes a completed row, even for its owner', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.release(key, record.ownerToken)).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for an absent key and for an expired row', async () => {
        expect(await store.release(newId(), newToken())).toBe(false);
        const key = newId();
        const record = await claimed(key, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.release(key, record.ownerToken)).toBe(false);
      });
    });

    describe('extend', () => {
      it('pushes expiresAt to the new lease when the lease would outlive the TTL (a live claim never expires)', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: 200, ttlMs: 400 });
        expect(await store.extend(key, record.ownerToken, 10_000)).toBe(true);
        const renewed = await store.get(key);
        expect(renewed!.expiresAtMs).toBe(renewed!.leaseExpiresAtMs);
        await sleep(450); // past the original TTL
        expect((await store.get(key))?.ownerToken).toBe(record.ownerToken);
        expect((await store.claim(key, claimRequest())).kind).toBe('existing');
      });

      it('renews the lease of its owner (lease = now + leaseMs) and changes nothing else', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: SHORT_MS });
        const before = Date.now();
        expect(await store.extend(key, record.ownerToken, 10_000)).toBe(true);
        const after = Date.now();
        const renewed = await store.get(key);
        expect(renewed).toEqual({ ...record, leaseExpiresAtMs: renewed?.leaseExpiresAtMs });
        expect(renewed!.leaseExpiresAtMs).toBeGreaterThanOrEqual(before + 10_000);
        expect(renewed!.leaseExpiresAtMs).toBeLessThanOrEqual(after + 10_000);
      });

      it('returns false for a non-owner, a completed row, an absent key and an expired row', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.extend(key, newToken(), LONG_MS)).toBe(false);
        expect(await store.get(key)).toEqual(record);
        const done = await completed(newId());
        expect(await store.extend(newId(), done.ownerToken, LONG_MS)).toBe(false);
        expect(await store.extend(newId(), newToken(), LONG_MS)).toBe(false);
        const expiring = newId();
        const short = await claimed(expiring, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.extend(expiring, short.ownerToken, LONG_MS)).toBe(false);
        expect(await store.get(expiring)).toBeUndefined();
      });

      it('returns false for the owner of a completed row', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.extend(key, record.ownerToken, LONG_MS)).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('rejects a non-positive leaseMs with a RangeError', async () => {
        const key = newId();
        const record = await claimed(key);
        await expect(store.extend(key, record.ownerToken, 0)).rejects.toThrow(RangeError);
        expect(await store.get(key)).toEqual(record);
      });
    });

    describe('get', () => {
      it('returns undefined for an absent key', async () => {
        expect(await store.get(newId())).toBeUndefined();
      });

      it('returns undefined once the row expired, in progress or completed, though the row is still there', async () => {
        const a = newId();
        const b = newId();
        await claimed(a, { ttlMs: SHORT_MS });
        const record = await claimed(b, { ttlMs: SHORT_MS });
        expect(await store.complete(b, record.ownerToken, sampleResponse())).toBe(true);
        expect(await store.get(a)).toBeDefined();
        await sleep(SHORT_MS + 20);
        expect(await store.get(a)).toBeUndefined();
        expect(await store.get(b)).toBeUndefined();
        expect(await h.countRows()).toBe(2);
      });

      it('reads what another instance wrote', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await h.anotherInstance().get(key)).toEqual(record);
      });
    });

    describe('unreadable rows', () => {
      itEach(it)(Object.entries(ROW_DAMAGES))(
        'rejects get, claim and takeOver with IdempotencyStoreError (durable) for %s; transaction: %s, before work',
        async (damage, transactionOutcome) => {
          const key = newId();
          const record = await claimed(key);
          await h.damage(key, damage as RowDamage);
          await expectStoreError(store.get(key));
          await expectStoreError(store.claim(key, claimRequest()));
          await expectStoreError(store.takeOver(key, record.ownerToken, claimRequest()));
          const { work, calls } = countedWork(async () => 'ran');
          const transaction = store.transaction(key, record.ownerToken, work);
          if (transactionOutcome === 'claim-lost') {
            await expect(transaction).rejects.toBeInstanceOf(IdempotencyClaimLostError);
          } else {
            await expectStoreError(transaction);
          }
          expect(calls()).toBe(0);
        },
      );

      it('are left out of listInProgress, which still lists the readable rows', async () => {
        const damaged = newId();
        const readable = newId();
        await claimed(damaged);
        await claimed(readable);
        await h.damage(damaged, 'fencing token 0');
        expect((await store.listInProgress(0, 10)).map((entry) => entry.key)).toEqual([readable]);
      });

      it('names the problem and what to do in the message, without the row content', async () => {
        const key = newId();
        await claimed(key);
        await h.damage(key, 'unknown state');
        const error = await expectStoreError(store.get(key));
        expect(error.message).toMatch(/state/);
        expect(error.message).toMatch(/repair or delete/);
      });
    });

    describe('deleteExpired', () => {
      it('deletes only expired rows (in progress and completed) and returns how many', async () => {
        const expiredInProgress = newId();
        await claimed(expiredInProgress, { ttlMs: SHORT_MS });
        const expiredCompleted = newId();
        const done = await claimed(expiredCompleted, { ttlMs: SHORT_MS });
        expect(await store.complete(expiredCompleted, done.ownerToken, sampleResponse())).toBe(true);
        const liveKeys = [newId(), newId()];
        await claimed(liveKeys[0]);
        await completed(liveKeys[1]);
        await sleep(SHORT_MS + 20);
        expect(await h.countRows()).toBe(4);
        expect(await store.deleteExpired(100)).toBe(2);
        expect(await h.countRows()).toBe(2);
        expect((await store.get(liveKeys[0]))?.state).toBe('in_progress');
        expect((await store.get(liveKeys[1]))?.state).toBe('completed');
        expect(await store.deleteExpired(100)).toBe(0);
      });

      it('deletes in batches of at most batchSize, oldest expiry first', async () => {
        const keys = Array.from({ length: 25 }, () => newId());
        for (const key of keys) await claimed(key, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.deleteExpired(10)).toBe(10);
        expect(await store.deleteExpired(10)).toBe(10);
        expect(await store.deleteExpired(10)).toBe(5);
        expect(await store.deleteExpired(10)).toBe(0);
        expect(await h.countRows()).toBe(0);
        expect((await claimed(keys[0])).fencingToken).toBe(1);
      });

      it('judges expiry by nowMs when given: a row expires at expiresAtMs exactly', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.deleteExpired(10, record.expiresAtMs - 1)).toBe(0);
        expect(await store.get(key)).toEqual(record);
        expect(await store.deleteExpired(10, record.expiresAtMs)).toBe(1);
        expect(await h.countRows()).toBe(0);
      });

      it('deletes each row once when 3 instances reap at the same time', async () => {
        for (let i = 0; i < 60; i += 1) await claimed(newId(), { ttlMs: SHORT_MS });
        await claimed(newId());
        await sleep(SHORT_MS + 20);
        const reapers = [store, h.anotherInstance(), h.anotherInstance()];
        const counts = await Promise.all(
          reapers.map(async (reaper) => {
            let total = 0;
            for (;;) {
              const deleted = await reaper.deleteExpired(7);
              total += deleted;
              if (deleted === 0) return total;
            }
          }),
        );
        expect(counts.reduce((a, b) => a + b, 0)).toBe(60);
        expect(await h.countRows()).toBe(1);
      });

      it('deletes each row once when 3 single batches run at the same time', async () => {
        for (let i = 0; i < 30; i += 1) await claimed(newId(), { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const counts = await Promise.all([store, h.anotherInstance(), h.anotherInstance()].map((s) => s.deleteExpired(100)));
        expect(counts.reduce((a, b) => a + b, 0)).toBe(30);
        expect(await h.countRows()).toBe(0);
      });

      itEach(it)([
        ['batchSize 0', 0, undefined],
        ['batchSize 1.5', 1.5, undefined],
        ['nowMs NaN', 10, Number.NaN],
        ['nowMs -1', 10, -1],
      ])('rejects %s with a RangeError', async (_name, batchSize, nowMs) => {
        await expect(store.deleteExpired(batchSize, nowMs)).rejects.toThrow(RangeError);
      });
    });

    describe('transaction', () => {
      it('commits the work and the completion together, and returns what work returned', async () => {
        const key = newId();
        const record = await claimed(key);
        const business = newId();
        const result = await store.transaction(key, record.ownerToken, async (transaction) => {
          expect(transaction.manager).toBeDefined();
          await h.writeBusinessRow(transaction, business);
          expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
          return 'value';
        });
        expect(result).toBe('value');
        expect(await h.businessRowExists(business)).toBe(true);
        expect(await store.get(key)).toEqual({ ...record, state: 'completed', response: sampleResponse() });
      });

      it('rolls back the business write and leaves the row in progress when work rejects, rethrowing its error as is', async () => {
        const key = newId();
        const record = await claimed(key);
        const business = newId();
        const failure = new Error('handler failed');
        const outcome = store.transaction(key, record.ownerToken, async (transaction) => {
          await h.writeBusinessRow(transaction, business);
          expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
          throw failure;
        });
        await expect(outcome).rejects.toBe(failure);
        expect(await h.businessRowExists(business)).toBe(false);
        expect(await store.get(key)).toEqual(record);
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
      });

      it('propagates a non-Error rejection of work unchanged', async () => {
        const key = newId();
        const record = await claimed(key);
        await expect(store.transaction(key, record.ownerToken, () => Promise.reject('plain string'))).rejects.toBe('plain string');
        expect(await store.get(key)).toEqual(record);
      });

      it('rejects with IdempotencyClaimLostError and runs nothing when the claim was taken over before it started (zombie)', async () => {
        const key = newId();
        const zombie = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const taken = await h.anotherInstance().takeOver(key, zombie.ownerToken, claimRequest());
        expect(taken.kind).toBe('claimed');
        const business = newId();
        const { work, calls } = countedWork(async (transaction) => {
          await h.writeBusinessRow(transaction, business);
        });
        const error = await store.transaction(key, zombie.ownerToken, work).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyClaimLostError);
        expect((error as IdempotencyClaimLostError).keyHash).toBe(key);
        expect(calls()).toBe(0);
        expect(await h.businessRowExists(business)).toBe(false);
        expect(await store.get(key)).toEqual(taken.record);
      });

      itEach(it)([
        ['an absent key', async (_c: Claimer) => ({ key: newId(), token: newToken() })],
        ['a wrong owner token', async (c: Claimer) => ({ key: await c.key(), token: newToken() })],
        ['a completed row', async (c: Claimer) => c.completedKey()],
        ['an expired row', async (c: Claimer) => c.expiredKey()],
        ['a released row', async (c: Claimer) => c.releasedKey()],
      ])('rejects with IdempotencyClaimLostError before work for %s', async (_name, setUp) => {
        const claimer: Claimer = {
          key: async () => {
            const key = newId();
            await claimed(key);
            return key;
          },
          completedKey: async () => {
            const key = newId();
            return { key, token: (await completed(key)).ownerToken };
          },
          expiredKey: async () => {
            const key = newId();
            const record = await claimed(key, { ttlMs: SHORT_MS });
            await sleep(SHORT_MS + 20);
            return { key, token: record.ownerToken };
          },
          releasedKey: async () => {
            const key = newId();
            const record = await claimed(key);
            expect(await store.release(key, record.ownerToken)).toBe(true);
            return { key, token: record.ownerToken };
          },
        };
        const { key, token } = await setUp(claimer);
        const { work, calls } = countedWork(async () => 'ran');
        await expect(store.transaction(key, token, work)).rejects.toBeInstanceOf(IdempotencyClaimLostError);
        expect(calls()).toBe(0);
      });

      it('lets work use the store again (get, extend) without waiting for itself', async () => {
        const key = newId();
        const record = await claimed(key);
        const seen = await store.transaction(key, record.ownerToken, async (transaction) => {
          const inside = await store.get(key);
          expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
          return inside;
        });
        expect(seen?.ownerToken).toBe(record.ownerToken);
        expect((await store.get(key))?.state).toBe('completed');
      });

      it('completes through the transaction only for the owner: another token gets false', async () => {
        const key = newId();
        const record = await claimed(key);
        await store.transaction(key, record.ownerToken, async (transaction) => {
          expect(await store.complete(key, newToken(), sampleResponse(), transaction)).toBe(false);
        });
        expect(await store.get(key)).toEqual(record);
      });

      it('never lets another caller read the completed row before the commit', async () => {
        const key = newId();
        const record = await claimed(key);
        const completedInside = signal();
        let committedAt = Number.POSITIVE_INFINITY;
        const running = store
          .transaction(key, record.ownerToken, async (transaction) => {
            expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
            completedInside.fire();
            await sleep(150);
          })
          .then(() => {
            committedAt = performance.now();
          });
        await completedInside.promise;
        const reader = h.anotherInstance();
        const seen = await reader.get(key);
        const readAt = performance.now();
        if (seen?.state === 'completed') expect(readAt).toBeGreaterThanOrEqual(committedAt);
        else expect(seen).toEqual(record);
        await running;
        expect((await store.get(key))?.state).toBe('completed');
      });

      it("does not undo another caller's claim that arrived while it ran, when it rolls back", async () => {
        const key = newId();
        const record = await claimed(key);
        const started = signal();
        const running = store.transaction(key, record.ownerToken, async () => {
          started.fire();
          await sleep(100);
          throw new Error('roll back');
        });
        await started.promise;
        const other = newId();
        const otherClaim = h.anotherInstance().claim(other, claimRequest());
        await expect(running).rejects.toThrow('roll back');
        expect((await otherClaim).kind).toBe('claimed');
        expect(await store.get(other)).toEqual((await otherClaim).record);
      });

      it('keeps a takeover from overtaking a live transaction: the takeover sees its committed outcome', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: SHORT_MS });
        const locked = signal();
        const business = newId();
        const running = store.transaction(key, record.ownerToken, async (transaction) => {
          locked.fire();
          await sleep(SHORT_MS + 150);
          await h.writeBusinessRow(transaction, business);
          expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
        });
        await locked.promise;
        await sleep(SHORT_MS + 20);
        // The lease has lapsed, but the owner is still inside its transaction.
        const result = await h.anotherInstance({ lockTimeoutMs: 5_000 }).takeOver(key, record.ownerToken, claimRequest());
        await running;
        expect(result.kind).toBe('existing');
        expect(result.record.ownerToken).toBe(record.ownerToken);
        expect(result.record.state).toBe('completed');
        expect(await h.businessRowExists(business)).toBe(true);
        expect((await store.get(key))?.fencingToken).toBe(1);
      });
    });

    describeRowLocks(resolved, () => h, () => store, claimed);

    describe('inspection and repair (listInProgress, forceDelete, ping)', () => {
      it('lists live in-progress rows created at least olderThanMs ago, oldest first, up to limit', async () => {
        await expectListingOldestFirst(store, { newId, claimed, completed });
      });

      it('force-deletes an in-progress row of any owner, and the fenced owner can no longer write or lock it', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await h.anotherInstance().forceDelete(key, 'in-progress')).toBe(true);
        expect(await store.get(key)).toBeUndefined();
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(false);
        expect(await store.extend(key, record.ownerToken, LONG_MS)).toBe(false);
        expect(await store.release(key, record.ownerToken)).toBe(false);
        const { work, calls } = countedWork(async () => undefined);
        await expect(store.transaction(key, record.ownerToken, work)).rejects.toBeInstanceOf(IdempotencyClaimLostError);
        expect(calls()).toBe(0);
        expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
      });

      it('leaves a completed row in place unless asked for any state', async () => {
        const key = newId();
        await completed(key);
        expect(await store.forceDelete(key)).toBe(false);
        expect((await store.get(key))?.state).toBe('completed');
        expect(await store.forceDelete(key, 'any')).toBe(true);
        expect(await store.get(key)).toBeUndefined();
        expect(await h.countRows()).toBe(0);
      });

      it('row locks: refuses, after lockTimeoutMs, to delete a row a live transaction holds; exclusive: runs after it', async () => {
        const key = newId();
        const record = await claimed(key);
        const locked = signal();
        const running = store.transaction(key, record.ownerToken, async (transaction) => {
          locked.fire();
          await sleep(800);
          expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
        });
        await locked.promise;
        const deleting = h.anotherInstance({ lockTimeoutMs: 200 }).forceDelete(key);
        if (h.locking === 'row-locks') {
          await expectStoreError(deleting);
        } else {
          expect(await deleting).toBe(false);
        }
        await running;
        expect((await store.get(key))?.state).toBe('completed');
      });

      it('refuses a negative age, a limit outside 1..1000 and an unknown scope; false for an absent key; answers a ping', async () => {
        await expectInspectionBasics(store, newId());
      });
    });
  });
}

type Claimer = {
  key(): Promise<string>;
  completedKey(): Promise<{ key: string; token: string }>;
  expiredKey(): Promise<{ key: string; token: string }>;
  releasedKey(): Promise<{ key: string; token: string }>;
};

/**
 * Row-lock behaviour (PostgreSQL): registered for every store, each test first asks the harness
 * whether it locks rows, and for an exclusive store checks the exclusive equivalent instead, so
 * nothing is skipped.
 */
function describeRowLocks(
  { describe, it }: ContractTestRunner,
  harness: () => DurableStoreUnderTest,
  storeOf: () => DurableIdempotencyStore,
  claimed: (key: string, overrides?: Partial<ClaimRequest>) => Promise<IdempotencyRecord>,
): void {
  describe('a takeover meeting a live transaction', () => {
    it('row locks: waits at most lockTimeoutMs and answers existing with the row as committed; exclusive: waits for the commit', async () => {
      const h = harness();
      const store = storeOf();
      const lockTimeoutMs = 300;
      const key = newId();
      const record = await claimed(key, { leaseMs: SHORT_MS });
      const locked = signal();
      const business = newId();
      const running = store.transaction(key, record.ownerToken, async (transaction) => {
        locked.fire();
        await sleep(lockTimeoutMs + 700);
        await h.writeBusinessRow(transaction, business);
        expect(await store.complete(key, record.ownerToken, sampleResponse(), transaction)).toBe(true);
      });
      await locked.promise;
      await sleep(SHORT_MS + 20);
      const { ms, value: result } = await elapsed(() =>
        h.anotherInstance({ lockTimeoutMs }).takeOver(key, record.ownerToken, claimRequest()),
      );
      if (h.locking === 'row-locks') {
        expect(ms).toBeGreaterThanOrEqual(lockTimeoutMs - 10);
        expect(ms).toBeLessThan(lockTimeoutMs + 500);
        expect(result).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      } else {
        expect(ms).toBeGreaterThanOrEqual(lockTimeoutMs + 500);
        expect(result.kind).toBe('existing');
        expect(result.record.state).toBe('completed');
      }
      await running;
      expect(await h.businessRowExists(business)).toBe(true);
      expect(await store.get(key)).toMatchObject({ state: 'completed', ownerToken: record.ownerToken, fencingToken: 1 });
    });

    it('row locks: a claim of the key answers existing at once; exclusive: after the commit', async () => {
      const h = harness();
      const store = storeOf();
      const key = newId();
      const record = await claimed(key);
      const locked = signal();
      const running = store.transaction(key, record.ownerToken, async () => {
        locked.fire();
        await sleep(600);
      });
      await locked.promise;
      const { ms, value: result } = await elapsed(() => h.anotherInstance().claim(key, claimRequest()));
      await running;
      expect(result).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      if (h.locking === 'row-locks') expect(ms).toBeLessThan(300);
      else expect(ms).toBeGreaterThanOrEqual(400);
    });

    it('row locks: deleteExpired skips an expired row a live transaction holds, without waiting; exclusive: deletes it after', async () => {
      const h = harness();
      const store = storeOf();
      const key = newId();
      const record = await claimed(key, { ttlMs: 150 });
      const locked = signal();
      const running = store.transaction(key, record.ownerToken, async () => {
        locked.fire();
        await sleep(700);
      });
      await locked.promise;
      await sleep(250);
      const { ms, value: deleted } = await elapsed(() => h.anotherInstance().deleteExpired(10));
      await running;
      if (h.locking === 'row-locks') {
        expect(ms).toBeLessThan(300);
        expect(deleted).toBe(0);
        expect(await store.deleteExpired(10)).toBe(1);
      } else {
        expect(ms).toBeGreaterThanOrEqual(300);
        expect(deleted).toBe(1);
      }
      expect(await h.countRows()).toBe(0);
    });

    it("answers the owner's heartbeat (extend) at once while its transaction holds the row, and renews with it", async () => {
      const store = storeOf();
      const key = newId();
      const record = await claimed(key, { leaseMs: 1_000 });
      let renewedAt = Number.POSITIVE_INFINITY;
      let committedAt = 0;
      // A timer started outside the transaction, as the engine's heartbeat is.
      const beat = new Promise<boolean>((resolve, reject) => {
        setTimeout(() => {
          store.extend(key, record.ownerToken, 30_000).then((renewed) => {
            renewedAt = performance.now();
            resolve(renewed);
          }, reject);
        }, 100);
      });
      await store.transaction(key, record.ownerToken, async () => {
        await sleep(500);
        committedAt = performance.now();
      });
      expect(await beat).toBe(true);
      expect(renewedAt).toBeLessThan(committedAt);
      expect((await store.get(key))!.leaseExpiresAtMs).toBeGreaterThan(record.leaseExpiresAtMs + 20_000);
    });

    it('takes over once the transaction rolled back and the lease is dead, and fences the old owner out', async () => {
      const h = harness();
      const store = storeOf();
      const key = newId();
      const record = await claimed(key, { leaseMs: SHORT_MS });
      const locked = signal();
      const running = store.transaction(key, record.ownerToken, async () => {
        locked.fire();
        await sleep(SHORT_MS + 100);
        throw new Error('handler crashed');
      });
      await locked.promise;
      await sleep(SHORT_MS + 20);
      const result = await h.anotherInstance({ lockTimeoutMs: 5_000 }).takeOver(key, record.ownerToken, claimRequest());
      await expect(running).rejects.toThrow('handler crashed');
      expect(result.kind).toBe('claimed');
      expect(result.record.fencingToken).toBe(2);
      const { work, calls } = countedWork(async () => undefined);
      await expect(store.transaction(key, record.ownerToken, work)).rejects.toBeInstanceOf(IdempotencyClaimLostError);
      expect(calls()).toBe(0);
    });
  });
}
