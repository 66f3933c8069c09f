import type { IdempotencyStore } from '../../stores/idempotency-store.js';
import { commonClaimCases, commonTakeOverCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { claimRequest, LONG_MS, newId, newToken, sampleResponse, sleep } from '../contract-fixtures.js';
import { itEach, type ContractTestRunner } from '../contract-runner.js';
import { CLOCK_SLACK_MS, SHORT_MS, type StoreSuite } from './store-suite.js';

/**
 * The fast-tier contract's `claim` and `takeOver` cases: who gets a key, and how a dead lease
 * changes hands (fencing tokens).
 *
 * @internal
 */

/** `claim`: absent, existing, expired keys; one winner among concurrent claims; checked arguments. */
export function describeClaim({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed } = suite;
  describe('claim', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

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

    commonClaimCases(it, suite);

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
}

/** `takeOver`: only a lapsed lease, only with the right token; the old owner is fenced out. */
export function describeTakeOver({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed } = suite;
  describe('takeOver', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

    commonTakeOverCases(it, suite);

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
}
