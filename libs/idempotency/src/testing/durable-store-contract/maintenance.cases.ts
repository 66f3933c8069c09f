import { IdempotencyClaimLostError } from '../../errors/idempotency-claim-lost.error.js';
import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { commonInspectionCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { claimRequest, LONG_MS, newId, sleep } from '../contract-fixtures.js';
import { itEach, type ContractTestRunner } from '../contract-runner.js';
import { expectListingOldestFirst } from '../inspection-checks.js';
import { countedWork, expectStoreError, signal } from './durable-helpers.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest, type DurableSuite } from './durable-suite.js';

/**
 * The durable-tier contract's maintenance cases: the reaper (`deleteExpired`), and inspection
 * and repair (`listInProgress`, `forceDelete`, `ping`).
 *
 * @internal
 */

/** `deleteExpired`: only expired rows, in batches, each once across instances. */
export function describeDeleteExpired({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('deleteExpired', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

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
      const counts = await Promise.all(
        [store, h.anotherInstance(), h.anotherInstance()].map((s) => s.deleteExpired(100)),
      );
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
}

/** Inspection and repair: listing stuck claims, force-deleting a row, a ping. */
export function describeInspection({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('inspection and repair (listInProgress, forceDelete, ping)', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

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

    commonInspectionCases(it, suite);
  });
}
