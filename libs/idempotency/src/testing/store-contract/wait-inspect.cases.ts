import type { IdempotencyStore } from '../../stores/idempotency-store.js';
import { commonInspectionCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { claimRequest, LONG_MS, newId, sampleResponse } from '../contract-fixtures.js';
import { type ContractTestRunner } from '../contract-runner.js';
import { expectListingOldestFirst } from '../inspection-checks.js';
import { PROMPT_MS, type StoreSuite } from './store-suite.js';

/**
 * The fast-tier contract's `waitForChange` cases (waiters woken promptly, never lost) and its
 * inspection and repair cases (`listInProgress`, `forceDelete`, `ping`).
 *
 * @internal
 */

async function elapsed(action: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await action();
  return performance.now() - started;
}

/** `waitForChange`: woken by a completion, a release or a takeover, at the timeout otherwise. */
export function describeWaitForChange({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed, completed } = suite;
  describe('waitForChange', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

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
}

/** Inspection and repair: listing stuck claims, force-deleting a record, a ping. */
export function describeInspection({ describe, it, beforeEach }: ContractTestRunner, suite: StoreSuite): void {
  const { claimed, completed } = suite;
  describe('inspection and repair (listInProgress, forceDelete, ping)', () => {
    let store: IdempotencyStore;
    beforeEach(() => {
      store = suite.store();
    });

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

    commonInspectionCases(it, suite);
  });
}
