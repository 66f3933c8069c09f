import { randomBytes } from 'node:crypto';
import type { StoredResponse } from '../../interfaces/idempotency-record.interface.js';
import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { commonCompleteCases, commonExtendCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { LONG_MS, newId, newToken, NON_UTF8_BODY, sleep } from '../contract-fixtures.js';
import { type ContractTestRunner } from '../contract-runner.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest, type DurableSuite } from './durable-suite.js';

/**
 * The durable-tier contract's cases for what the owner of a claim does with its row: complete
 * it with a response, release it, extend its lease.
 *
 * @internal
 */

/** `complete`: the response stored exactly, once, by the owner only. */
export function describeComplete({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('complete', () => {
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

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

    commonCompleteCases(it, suite);

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

    it('rejects headers that are not strings or string arrays, and a body that is not a Buffer, with a TypeError', async () => {
      const key = newId();
      const record = await claimed(key);
      const badHeaders = { 'x-n': 1 } as unknown as StoredResponse['headers'];
      await expect(store.complete(key, record.ownerToken, sampleResponse({ headers: badHeaders }))).rejects.toThrow(
        TypeError,
      );
      const badBody = 'text' as unknown as Buffer;
      await expect(store.complete(key, record.ownerToken, sampleResponse({ body: badBody }))).rejects.toThrow(
        TypeError,
      );
      expect(await store.get(key)).toEqual(record);
    });
  });
}

/** `release`: the owner deletes its in-progress row; a completed row is never deleted. */
export function describeRelease({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('release', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

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
}

/** `extend`: the owner renews its lease; a live claim never expires. */
export function describeExtend({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('extend', () => {
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

    commonExtendCases(it, suite);

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
  });
}
