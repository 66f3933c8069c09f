import { createHash, randomBytes } from 'node:crypto';
import type { IdempotencyRecord, StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, IdempotencyStore } from '../stores/idempotency-store.js';
import { expect } from './contract-expect.js';
import { itEach, resolveRunner, type ContractTestRunner } from './contract-runner.js';
import { expectInspectionBasics, expectListingOldestFirst } from './inspection-checks.js';

/**
 * The fast-tier contract (`IdempotencyStore`, docs/durability.md "The record and its states"), as a suite any
 * implementation must pass. Real timers and short TTLs: expiry and leases are measured by the
 * store's own clock (Redis `TIME` for Redis), never faked.
 *
 * @publicApi
 */
export interface StoreUnderTest {
  store: IdempotencyStore;
  /** Closes what the factory opened and removes the records the test wrote. */
  cleanup(): Promise<void>;
}

/** Lifetimes short enough to watch expire. */
const SHORT_MS = 40;
/** Long enough to outlive any test. */
const LONG_MS = 60_000;
/** Tolerance between the test's clock and the store's (Redis may run on another host). */
const CLOCK_SLACK_MS = 50;
/** "Promptly": a notification, not the timeout, woke the waiter. */
const PROMPT_MS = 500;

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A random storage id shaped like the engine's (32 hex characters). @publicApi */
export const newId = (): string => randomBytes(16).toString('hex');
/** A random owner token shaped like the engine's (22 base64url characters). @publicApi */
export const newToken = (): string => randomBytes(16).toString('base64url');
/** A random fingerprint shaped like the engine's (base64url SHA-256, 43 characters). @publicApi */
export const newFingerprint = (): string => createHash('sha256').update(randomBytes(16)).digest('base64url');

/** A `ClaimRequest` with fresh token and fingerprint and 60 s lease and lifetime, `overrides` applied. @publicApi */
export function claimRequest(overrides: Partial<ClaimRequest> = {}): ClaimRequest {
  return { ownerToken: newToken(), fingerprint: newFingerprint(), leaseMs: LONG_MS, ttlMs: LONG_MS, ...overrides };
}

/** Bytes that are not valid UTF-8 (lone continuation bytes, an overlong form, a surrogate, NUL, CR LF). @publicApi */
export const NON_UTF8_BODY = Buffer.from([0x00, 0xff, 0xfe, 0x80, 0xbf, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x0d, 0x0a, 0x7f]);

/** A response with awkward headers (multi-valued, empty, non-ASCII) and a non-UTF-8 body, `overrides` applied. @publicApi */
export function sampleResponse(overrides: Partial<StoredResponse> = {}): StoredResponse {
  return {
    statusCode: 201,
    headers: {
      'content-type': 'application/octet-stream',
      location: '/orders/8f14e45f-ceea-467f-a0e6-2f1a3b9c0d11',
      link: ['</a>; rel="a"', '</b, c>; rel="b"'],
      'x-empty': [],
      'content-disposition': 'attachment; filename="reçu ✓.pdf"',
    },
    body: Buffer.from(NON_UTF8_BODY),
    ...overrides,
  };
}

/**
 * Registers the contract suite for one store. `makeStore` runs before every test and must give
 * a store with no records (a fresh instance or a fresh key prefix). `runner` is your test
 * runner's `describe`, `it`, `beforeEach` and `afterEach`; without it, its globals are used.
 *
 * @example
 * describeStoreContract('my store', async () => {
 *   const store = new MyStore(await connect());
 *   return { store, cleanup: () => store.close() };
 * });
 * @publicApi
 */
export function describeStoreContract(name: string, makeStore: () => Promise<StoreUnderTest>, runner?: ContractTestRunner): void {
  const { describe, it, beforeEach, afterEach } = resolveRunner(runner);
  describe(`IdempotencyStore contract: ${name}`, () => {
    let store: IdempotencyStore;
    let cleanup: (() => Promise<void>) | undefined;

    beforeEach(async () => {
      ({ store, cleanup } = await makeStore());
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

    async function elapsed(action: () => Promise<unknown>): Promise<number> {
      const started = performance.now();
      await action();
      return performance.now() - started;
    }

    describe('claim', () => {
      it('claims an absent key: in_progress, fencing token 1, lease and expiry from the claim time', async () => {
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
        expect(record.response).toBeUndefined();
        expect(record.createdAtMs).toBeGreaterThanOrEqual(before - CLOCK_SLACK_MS);
        expect(record.createdAtMs).toBeLessThanOrEqual(after + CLOCK_SLACK_MS);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns an existing in-progress record unchanged, with the store clock (nowMs)', async () => {
        const key = newId();
        const first = await claimed(key);
        const result = await store.claim(key, claimRequest());
        expect(result.kind).toBe('existing');
        if (result.kind !== 'existing') return;
        expect(result.record).toEqual(first);
        expect(result.nowMs).toBeGreaterThanOrEqual(first.createdAtMs);
        expect(result.nowMs).toBeLessThanOrEqual(Date.now() + CLOCK_SLACK_MS);
        expect(await store.get(key)).toEqual(first);
      });

      it('returns an existing completed record with its response', async () => {
        const key = newId();
        const record = await completed(key);
        const result = await store.claim(key, claimRequest());
        expect(result).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      });

      it('returns an in-progress record whose lease lapsed as existing (recovery is takeOver, not claim)', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const result = await store.claim(key, claimRequest());
        expect(result.kind).toBe('existing');
        if (result.kind !== 'existing') return;
        expect(result.record).toEqual(first);
        expect(result.nowMs).toBeGreaterThanOrEqual(first.leaseExpiresAtMs);
      });

      it('claims again once the record expired (expiresAtMs <= now): new owner, fencing token 1', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS, ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const request = claimRequest();
        const result = await store.claim(key, request);
        expect(result.kind).toBe('claimed');
        expect(result.record.ownerToken).toBe(request.ownerToken);
        expect(result.record.fencingToken).toBe(1);
        expect(result.record.createdAtMs).toBeGreaterThanOrEqual(first.expiresAtMs);
      });

      it('claims again once a completed record expired', async () => {
        const key = newId();
        const record = await claimed(key, { ttlMs: SHORT_MS });
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
        await sleep(SHORT_MS + 20);
        expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
      });

      it('gives exactly one of 50 concurrent claims of one key the record', async () => {
        const key = newId();
        const results = await Promise.all(Array.from({ length: 50 }, () => store.claim(key, claimRequest())));
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners).toHaveLength(1);
        const owner = winners[0].record.ownerToken;
        for (const r of results) expect(r.record.ownerToken).toBe(owner);
      });

      it('keeps keys apart', async () => {
        const a = newId();
        const b = newId();
        await claimed(a);
        expect((await store.claim(b, claimRequest())).kind).toBe('claimed');
      });

      itEach(it)([
        ['leaseMs', 0],
        ['leaseMs', -1],
        ['leaseMs', 1.5],
        ['leaseMs', Number.NaN],
        ['ttlMs', 0],
        ['ttlMs', Number.POSITIVE_INFINITY],
        ['ttlMs', Number.MAX_SAFE_INTEGER],
      ])('rejects %s = %p with a RangeError and writes nothing', async (field, value) => {
        const key = newId();
        await expect(store.claim(key, claimRequest({ [field]: value }))).rejects.toThrow(RangeError);
        expect(await store.get(key)).toBeUndefined();
      });

      it('rejects an empty owner token or fingerprint with a TypeError', async () => {
        await expect(store.claim(newId(), claimRequest({ ownerToken: '' }))).rejects.toThrow(TypeError);
        await expect(store.claim(newId(), claimRequest({ fingerprint: '' }))).rejects.toThrow(TypeError);
      });
    });

    describe('takeOver', () => {
      it('takes over a lapsed lease with the right token: new owner and fingerprint, fencing + 1, createdAt kept', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const request = claimRequest({ leaseMs: 5_000, ttlMs: 90_000 });
        const result = await store.takeOver(key, first.ownerToken, request);
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

      it('returns the record unchanged when the expected token is wrong', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const result = await store.takeOver(key, newToken(), claimRequest());
        expect(result).toEqual({ kind: 'existing', record: first, nowMs: expect.any(Number) });
        expect(await store.get(key)).toEqual(first);
      });

      it('returns the record unchanged while the lease is live, even with the right token (the owner renewed)', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.extend(key, first.ownerToken, LONG_MS)).toBe(true);
        const renewed = await store.get(key);
        const result = await store.takeOver(key, first.ownerToken, claimRequest());
        expect(result).toEqual({ kind: 'existing', record: renewed, nowMs: expect.any(Number) });
        if (result.kind === 'existing') expect(result.nowMs).toBeLessThan(renewed!.leaseExpiresAtMs);
      });

      it('returns a completed record unchanged, even with the right token', async () => {
        const key = newId();
        const record = await completed(key);
        const result = await store.takeOver(key, record.ownerToken, claimRequest());
        expect(result).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      });

      it('claims an absent key as claim would (fencing token 1)', async () => {
        const key = newId();
        const request = claimRequest();
        const result = await store.takeOver(key, newToken(), request);
        expect(result.kind).toBe('claimed');
        expect(result.record).toMatchObject({ state: 'in_progress', ownerToken: request.ownerToken, fencingToken: 1 });
      });

      it('claims an expired key as claim would (fencing token 1, new createdAt)', async () => {
        const key = newId();
        const first = await claimed(key, { leaseMs: SHORT_MS, ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const result = await store.takeOver(key, first.ownerToken, claimRequest());
        expect(result.kind).toBe('claimed');
        expect(result.record.fencingToken).toBe(1);
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

      it('lets exactly one of 20 concurrent takeovers of one dead lease win', async () => {
        const key = newId();
        const dead = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const results = await Promise.all(
          Array.from({ length: 20 }, () => store.takeOver(key, dead.ownerToken, claimRequest())),
        );
        const winners = results.filter((r) => r.kind === 'claimed');
        expect(winners).toHaveLength(1);
        expect(winners[0].record.fencingToken).toBe(2);
        for (const r of results) expect(r.record.ownerToken).toBe(winners[0].record.ownerToken);
      });
    });

    describe('complete', () => {
      it('stores status, headers (multi-value too) and body bytes exactly, keeps expiresAt and the claim fields', async () => {
        const key = newId();
        const record = await claimed(key, { ttlMs: 3_600_000 });
        const response = sampleResponse();
        expect(await store.complete(key, record.ownerToken, response)).toBe(true);
        const stored = await store.get(key);
        expect(stored).toEqual({ ...record, state: 'completed', response: sampleResponse() });
        expect(stored?.expiresAtMs).toBe(record.expiresAtMs);
        const body = stored?.response?.body;
        expect(Buffer.isBuffer(body)).toBe(true);
        expect(body?.equals(NON_UTF8_BODY)).toBe(true);
        expect(stored?.response?.headers.link).toEqual(['</a>; rel="a"', '</b, c>; rel="b"']);
      });

      it('stores an empty body as an empty Buffer', async () => {
        const stored = await completed(newId(), sampleResponse({ statusCode: 200, body: Buffer.alloc(0) }));
        expect(Buffer.isBuffer(stored.response?.body)).toBe(true);
        expect(stored.response?.body).toHaveLength(0);
        expect(stored.response?.bodyOmitted).toBeUndefined();
      });

      it('stores a response without a body (a 204), with neither body nor bodyOmitted', async () => {
        const stored = await completed(newId(), { statusCode: 204, headers: {} });
        expect(stored.response).toEqual({ statusCode: 204, headers: {} });
        expect('body' in stored.response!).toBe(false);
      });

      it('stores bodyOmitted (a body too large or streamed) without a body', async () => {
        const stored = await completed(newId(), { statusCode: 201, headers: { location: '/x' }, bodyOmitted: true });
        expect(stored.response).toEqual({ statusCode: 201, headers: { location: '/x' }, bodyOmitted: true });
        expect(stored.response?.body).toBeUndefined();
      });

      it('stores a 1 MiB body of random bytes exactly', async () => {
        const body = randomBytes(1_048_576);
        const stored = await completed(newId(), sampleResponse({ body }));
        expect(stored.response?.body?.equals(body)).toBe(true);
      });

      it('returns false and changes nothing for a non-owner', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.complete(key, newToken(), sampleResponse())).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for a record that is already completed, keeping the first response', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.complete(key, record.ownerToken, sampleResponse({ statusCode: 500 }))).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for an absent key and writes nothing', async () => {
        const key = newId();
        expect(await store.complete(key, newToken(), sampleResponse())).toBe(false);
        expect(await store.get(key)).toBeUndefined();
      });

      it('returns false once the record expired, and does not bring it back', async () => {
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

      it('rejects a header value that is neither a string nor an array of strings with a TypeError', async () => {
        const key = newId();
        const record = await claimed(key);
        const headers = { 'x-count': 3 } as unknown as StoredResponse['headers'];
        await expect(store.complete(key, record.ownerToken, sampleResponse({ headers }))).rejects.toThrow(TypeError);
        expect(await store.get(key)).toEqual(record);
      });

      it('rejects a status code outside 100–999 with a RangeError and changes nothing', async () => {
        const key = newId();
        const record = await claimed(key);
        await expect(store.complete(key, record.ownerToken, sampleResponse({ statusCode: 42 }))).rejects.toThrow(
          RangeError,
        );
        expect(await store.get(key)).toEqual(record);
      });
    });

    describe('release', () => {
      it('deletes an in-progress record for its owner, and the key can be claimed afresh', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.release(key, record.ownerToken)).toBe(true);
        expect(await store.get(key)).toBeUndefined();
        const again = await store.claim(key, claimRequest());
        expect(again.kind).toBe('claimed');
        expect(again.record.fencingToken).toBe(1);
      });

      it('returns false and changes nothing for a non-owner', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.release(key, newToken())).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for a completed record, even for its owner', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.release(key, record.ownerToken)).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for an absent key', async () => {
        expect(await store.release(newId(), newToken())).toBe(false);
      });

      it('returns false twice in a row after one release', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.release(key, record.ownerToken)).toBe(true);
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

      it('moves the lease to now + leaseMs for the owner and changes nothing else', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: 1_000 });
        await sleep(20);
        const before = Date.now();
        expect(await store.extend(key, record.ownerToken, 30_000)).toBe(true);
        const after = Date.now();
        const extended = await store.get(key);
        expect(extended).toEqual({ ...record, leaseExpiresAtMs: extended?.leaseExpiresAtMs });
        expect(extended!.leaseExpiresAtMs).toBeGreaterThanOrEqual(before + 30_000 - CLOCK_SLACK_MS);
        expect(extended!.leaseExpiresAtMs).toBeLessThanOrEqual(after + 30_000 + CLOCK_SLACK_MS);
        expect(extended!.leaseExpiresAtMs - 30_000).toBeGreaterThan(record.createdAtMs);
      });

      it('keeps the claim alive past its first lease: a takeover with the right token is refused', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: SHORT_MS * 2 });
        for (let i = 0; i < 3; i++) {
          await sleep(SHORT_MS);
          expect(await store.extend(key, record.ownerToken, SHORT_MS * 2)).toBe(true);
        }
        expect((await store.takeOver(key, record.ownerToken, claimRequest())).kind).toBe('existing');
      });

      it('renews a lapsed lease when nobody took over', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        expect(await store.extend(key, record.ownerToken, LONG_MS)).toBe(true);
        expect((await store.get(key))!.leaseExpiresAtMs).toBeGreaterThan(Date.now() + LONG_MS / 2);
      });

      it('returns false and changes nothing for a non-owner', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.extend(key, newToken(), LONG_MS)).toBe(false);
        expect(await store.get(key)).toEqual(record);
      });

      it('returns false for a completed record and for an absent key', async () => {
        const key = newId();
        const record = await completed(key);
        expect(await store.extend(key, record.ownerToken, LONG_MS)).toBe(false);
        expect(await store.get(key)).toEqual(record);
        expect(await store.extend(newId(), newToken(), LONG_MS)).toBe(false);
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

      it('returns undefined once the record expired, in progress or completed', async () => {
        const a = newId();
        const b = newId();
        await claimed(a, { ttlMs: SHORT_MS });
        const record = await claimed(b, { ttlMs: SHORT_MS });
        expect(await store.complete(b, record.ownerToken, sampleResponse())).toBe(true);
        expect(await store.get(a)).toBeDefined();
        await sleep(SHORT_MS + 20);
        expect(await store.get(a)).toBeUndefined();
        expect(await store.get(b)).toBeUndefined();
      });

      it('returns copies: mutating a returned record, its headers or its body changes nothing stored', async () => {
        const key = newId();
        const record = await completed(key);
        const copy = await store.get(key);
        copy!.ownerToken = 'mutated';
        copy!.fencingToken = 99;
        copy!.response!.statusCode = 500;
        (copy!.response!.headers.link as string[]).push('</c>');
        copy!.response!.headers['x-new'] = '1';
        copy!.response!.body![0] = 0x41;
        expect(await store.get(key)).toEqual(record);
      });

      it('returns copies from claim and takeOver too', async () => {
        const key = newId();
        const result = await store.claim(key, claimRequest());
        const snapshot = { ...result.record };
        result.record.ownerToken = 'mutated';
        result.record.leaseExpiresAtMs = 0;
        expect(await store.get(key)).toEqual(snapshot);
      });

      it('keeps its own copy of what it was given: mutating the response after complete changes nothing', async () => {
        const key = newId();
        const record = await claimed(key);
        const response = sampleResponse();
        expect(await store.complete(key, record.ownerToken, response)).toBe(true);
        response.body![0] = 0x41;
        (response.headers.link as string[]).push('</c>');
        response.headers['x-new'] = '1';
        expect((await store.get(key))?.response).toEqual(sampleResponse());
      });
    });

    describe('restore', () => {
      function durableRecord(overrides: Partial<IdempotencyRecord> = {}): IdempotencyRecord {
        const now = Date.now();
        return {
          state: 'completed',
          fingerprint: newFingerprint(),
          ownerToken: newToken(),
          fencingToken: 3,
          createdAtMs: now - 10_000,
          leaseExpiresAtMs: now - 5_000,
          expiresAtMs: now + LONG_MS,
          response: sampleResponse(),
          ...overrides,
        };
      }

      it('writes a completed record as it is when the key is absent', async () => {
        const key = newId();
        const record = durableRecord();
        expect(await store.restore(key, record)).toBe(true);
        expect(await store.get(key)).toEqual(record);
        const replayed = await store.claim(key, claimRequest());
        expect(replayed).toEqual({ kind: 'existing', record, nowMs: expect.any(Number) });
      });

      it('writes an in-progress record as it is, and its owner can complete it', async () => {
        const key = newId();
        const now = Date.now();
        const { response: _omitted, ...fields } = durableRecord({ leaseExpiresAtMs: now + LONG_MS });
        const record: IdempotencyRecord = { ...fields, state: 'in_progress' };
        expect(await store.restore(key, record)).toBe(true);
        expect(await store.get(key)).toEqual(record);
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(true);
      });

      it('writes nothing and returns false when a live record exists', async () => {
        const key = newId();
        const existing = await claimed(key);
        expect(await store.restore(key, durableRecord())).toBe(false);
        expect(await store.get(key)).toEqual(existing);
      });

      it('writes over an expired record', async () => {
        const key = newId();
        await claimed(key, { ttlMs: SHORT_MS });
        await sleep(SHORT_MS + 20);
        const record = durableRecord();
        expect(await store.restore(key, record)).toBe(true);
        expect(await store.get(key)).toEqual(record);
      });

      it('writes nothing and returns false for a record that is already expired', async () => {
        const key = newId();
        expect(await store.restore(key, durableRecord({ expiresAtMs: Date.now() - 1_000 }))).toBe(false);
        expect(await store.get(key)).toBeUndefined();
        expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
      });

      it('lets the restored record expire at its own expiresAtMs', async () => {
        const key = newId();
        expect(await store.restore(key, durableRecord({ expiresAtMs: Date.now() + 150 }))).toBe(true);
        expect(await store.get(key)).toBeDefined();
        await sleep(150 + CLOCK_SLACK_MS);
        expect(await store.get(key)).toBeUndefined();
      });

      it('keeps its own copy of the record it was given', async () => {
        const key = newId();
        const record = durableRecord();
        expect(await store.restore(key, record)).toBe(true);
        record.response!.body![0] = 0x41;
        record.ownerToken = 'mutated';
        expect((await store.get(key))?.response?.body?.equals(NON_UTF8_BODY)).toBe(true);
        expect((await store.get(key))?.ownerToken).not.toBe('mutated');
      });

      it('rejects a completed record without a response, and one with fencing token 0', async () => {
        await expect(store.restore(newId(), durableRecord({ response: undefined }))).rejects.toThrow(TypeError);
        await expect(store.restore(newId(), durableRecord({ fencingToken: 0 }))).rejects.toThrow(RangeError);
      });
    });

    describe('waitForChange', () => {
      it('resolves promptly when the record is completed (well before the timeout)', async () => {
        const key = newId();
        const record = await claimed(key);
        setTimeout(() => void store.complete(key, record.ownerToken, sampleResponse()), 60);
        const ms = await elapsed(() => store.waitForChange(key, 5_000));
        expect(ms).toBeGreaterThanOrEqual(50);
        expect(ms).toBeLessThan(PROMPT_MS);
        expect((await store.get(key))?.state).toBe('completed');
      });

      it('resolves promptly when the record is released', async () => {
        const key = newId();
        const record = await claimed(key);
        setTimeout(() => void store.release(key, record.ownerToken), 60);
        const ms = await elapsed(() => store.waitForChange(key, 5_000));
        expect(ms).toBeGreaterThanOrEqual(50);
        expect(ms).toBeLessThan(PROMPT_MS);
        expect(await store.get(key)).toBeUndefined();
      });

      it('resolves promptly when a dead lease is taken over', async () => {
        const key = newId();
        const record = await claimed(key, { leaseMs: 20 });
        setTimeout(() => void store.takeOver(key, record.ownerToken, claimRequest()), 60);
        const ms = await elapsed(() => store.waitForChange(key, 5_000));
        expect(ms).toBeLessThan(PROMPT_MS);
        expect((await store.get(key))?.fencingToken).toBe(2);
      });

      it('resolves at the timeout when nothing changes, and an extend does not wake it', async () => {
        const key = newId();
        const record = await claimed(key);
        setTimeout(() => void store.extend(key, record.ownerToken, LONG_MS), 30);
        const ms = await elapsed(() => store.waitForChange(key, 200));
        expect(ms).toBeGreaterThanOrEqual(190);
        expect(ms).toBeLessThan(200 + PROMPT_MS);
      });

      it('is not woken by a change to another key', async () => {
        const key = newId();
        const other = newId();
        await claimed(key);
        const otherRecord = await claimed(other);
        setTimeout(() => void store.complete(other, otherRecord.ownerToken, sampleResponse()), 30);
        const ms = await elapsed(() => store.waitForChange(key, 200));
        expect(ms).toBeGreaterThanOrEqual(190);
      });

      it('wakes every waiter of the key at once', async () => {
        const key = newId();
        const record = await claimed(key);
        setTimeout(() => void store.complete(key, record.ownerToken, sampleResponse()), 60);
        const ms = await elapsed(() => Promise.all(Array.from({ length: 10 }, () => store.waitForChange(key, 5_000))));
        expect(ms).toBeLessThan(PROMPT_MS);
      });

      it('resolves at once when the record is no longer in progress (no wake-up is lost)', async () => {
        const done = newId();
        await completed(done);
        expect(await elapsed(() => store.waitForChange(done, 5_000))).toBeLessThan(PROMPT_MS);
        expect(await elapsed(() => store.waitForChange(newId(), 5_000))).toBeLessThan(PROMPT_MS);
      });

      it('resolves at once for a timeout of 0', async () => {
        const key = newId();
        await claimed(key);
        expect(await elapsed(() => store.waitForChange(key, 0))).toBeLessThan(PROMPT_MS);
      });

      it('can wait again on the same key after a wake-up', async () => {
        const key = newId();
        const first = await claimed(key);
        setTimeout(() => void store.release(key, first.ownerToken), 30);
        await store.waitForChange(key, 5_000);
        const second = await claimed(key);
        setTimeout(() => void store.complete(key, second.ownerToken, sampleResponse()), 60);
        expect(await elapsed(() => store.waitForChange(key, 5_000))).toBeLessThan(PROMPT_MS);
      });
    });
    describe('inspection and repair (listInProgress, forceDelete, ping)', () => {
      it('lists live in-progress records at least olderThanMs old by its clock, oldest first, up to limit', async () => {
        await expectListingOldestFirst(store, { newId, claimed, completed });
      });

      it('force-deletes an in-progress record of any owner, and the fenced owner can no longer write', async () => {
        const key = newId();
        const record = await claimed(key);
        expect(await store.forceDelete(key, 'in-progress')).toBe(true);
        expect(await store.get(key)).toBeUndefined();
        expect(await store.complete(key, record.ownerToken, sampleResponse())).toBe(false);
        expect(await store.extend(key, record.ownerToken, LONG_MS)).toBe(false);
        expect(await store.release(key, record.ownerToken)).toBe(false);
        expect(await store.get(key)).toBeUndefined();
        expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
      });

      it('leaves a completed record in place unless asked for any state', async () => {
        const key = newId();
        await completed(key);
        expect(await store.forceDelete(key)).toBe(false);
        expect(await store.forceDelete(key, 'in-progress')).toBe(false);
        expect((await store.get(key))?.state).toBe('completed');
        expect(await store.forceDelete(key, 'any')).toBe(true);
        expect(await store.get(key)).toBeUndefined();
      });

      it('wakes the waiters of a force-deleted record', async () => {
        const key = newId();
        await claimed(key);
        setTimeout(() => void store.forceDelete(key), 60);
        expect(await elapsed(() => store.waitForChange(key, 10_000))).toBeLessThan(5_000);
      });

      it('refuses a negative age, a limit outside 1..1000 and an unknown scope; false for an absent key; answers a ping', async () => {
        await expectInspectionBasics(store, newId());
      });
    });
  });
}
