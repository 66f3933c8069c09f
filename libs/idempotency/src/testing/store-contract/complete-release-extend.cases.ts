import { randomBytes } from 'node:crypto';
import type { StoredResponse } from '../../interfaces/idempotency-record.interface.js';
import type { IdempotencyStore } from '../../stores/idempotency-store.js';
import { commonCompleteCases, commonExtendCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { claimRequest, LONG_MS, newId, newToken, NON_UTF8_BODY, sampleResponse, sleep } from '../contract-fixtures.js';
import { type ContractTestRunner } from '../contract-runner.js';
import { CLOCK_SLACK_MS, SHORT_MS, type StoreSuite } from './store-suite.js';

/**
 * The fast-tier contract's cases for what the owner of a claim does with it: complete it with a
 * response, release it, extend its lease.
 *
 * @internal
 */

/** `complete`: the response stored exactly, once, by the owner only. */
export function describeComplete({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed, completed } = suite;
  describe('complete', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

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

    commonCompleteCases(it, suite);

    it('stores a 1 MiB body of random bytes exactly', async () => {
      const body = randomBytes(1_048_576);
      const stored = await completed(newId(), sampleResponse({ body }));
      expect(stored.response?.body?.equals(body)).toBe(true);
    });

    it('rejects a header value that is neither a string nor an array of strings with a TypeError', async () => {
      const key = newId();
      const record = await claimed(key);
      const headers = { 'x-count': 3 } as unknown as StoredResponse['headers'];
      await expect(store.complete(key, record.ownerToken, sampleResponse({ headers }))).rejects.toThrow(TypeError);
      expect(await store.get(key)).toEqual(record);
    });
  });
}

/** `release`: the owner frees an in-progress key; nothing else is deleted. */
export function describeRelease({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed, completed } = suite;
  describe('release', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

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
}

/** `extend`: the owner renews its lease; a live claim never expires. */
export function describeExtend({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed, completed } = suite;
  describe('extend', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

    commonExtendCases(it, suite);

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
  });
}
