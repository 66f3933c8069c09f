import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { commonClaimCases, commonTakeOverCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { claimRequest, LONG_MS, newId, newToken, sleep } from '../contract-fixtures.js';
import { itEach, type ContractTestRunner } from '../contract-runner.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest, type DurableSuite } from './durable-suite.js';

/**
 * The durable-tier contract's `claim` and `takeOver` cases: who gets a row, across instances,
 * and how an expired row or a dead lease changes hands (fencing tokens).
 *
 * @internal
 */

/** `claim`: absent, existing, expired rows; one winner across instances; checked arguments. */
export function describeClaim({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed } = suite;
  describe('claim', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

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

    commonClaimCases(it, suite);

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
}

/** `takeOver`: only a lapsed lease, only with the right token; the old owner is fenced out. */
export function describeTakeOver({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed } = suite;
  describe('takeOver', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

    commonTakeOverCases(it, suite);

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

    it('lets exactly one of 20 concurrent takeovers of one dead lease win, across two instances', async () => {
      const key = newId();
      const dead = await claimed(key, { leaseMs: SHORT_MS });
      await sleep(SHORT_MS + 20);
      const other = h.anotherInstance();
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          (i % 2 === 0 ? store : other).takeOver(key, dead.ownerToken, claimRequest()),
        ),
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
}
