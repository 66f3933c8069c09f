import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { expect } from '../contract-expect.js';
import { newId, sleep } from '../contract-fixtures.js';
import { itEach, type ContractTestRunner } from '../contract-runner.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest, type DurableSuite } from './durable-suite.js';

/**
 * The durable-tier contract's `deleteExpired` for a store whose expired rows go with a whole time
 * partition (`expiry: { partitionMs }`): a partition is dropped once every row in it has expired,
 * never while one is live, and each once across instances.
 *
 * @internal
 */

/**
 * Calls `deleteExpired` on every store of `reapers` at once, round after round, until `expected`
 * rows are gone or `patienceMs` have passed; resolves with the rows they reported.
 */
async function reapUntil(reapers: DurableIdempotencyStore[], expected: number, patienceMs: number): Promise<number> {
  const giveUpAt = Date.now() + patienceMs;
  let total = 0;
  while (total < expected && Date.now() < giveUpAt) {
    const counts = await Promise.all(reapers.map((reaper) => reaper.deleteExpired(100)));
    total += counts.reduce((a, b) => a + b, 0);
    if (total < expected) await sleep(100);
  }
  return total;
}

export function describeDropExpiredPartitions(
  { describe, it, beforeEach }: ContractTestRunner,
  suite: DurableSuite,
  partitionMs: number,
): void {
  const { claimed } = suite;
  /** Long enough for a partition to pass, its rows to expire and the store's grace after them. */
  const patienceMs = 3 * partitionMs + 10_000;
  describe('deleteExpired (time partitions)', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

    it('drops a past partition once all its rows expired (in progress and completed), returns how many, keeps live rows', async () => {
      await claimed(newId(), { ttlMs: SHORT_MS });
      const done = newId();
      const record = await claimed(done, { ttlMs: SHORT_MS });
      expect(await store.complete(done, record.ownerToken, sampleResponse())).toBe(true);
      await sleep(partitionMs);
      const live = newId();
      await claimed(live);
      expect(await reapUntil([store], 2, patienceMs)).toBe(2);
      expect(await h.countRows()).toBe(1);
      expect((await store.get(live))?.state).toBe('in_progress');
      expect(await store.get(done)).toBeUndefined();
    });

    it("keeps a past partition while a row in it is live (extended past the partition's end)", async () => {
      const key = newId();
      const record = await claimed(key, { ttlMs: SHORT_MS, leaseMs: SHORT_MS });
      expect(await store.extend(key, record.ownerToken, patienceMs)).toBe(true);
      const gone = newId();
      await claimed(gone, { ttlMs: SHORT_MS });
      await sleep(2 * partitionMs + SHORT_MS);
      expect(await store.deleteExpired(100)).toBe(0);
      expect(await h.countRows()).toBe(2);
      expect((await store.get(key))?.ownerToken).toBe(record.ownerToken);
      expect(await store.release(key, record.ownerToken)).toBe(true);
      expect(await reapUntil([store], 1, patienceMs)).toBe(1);
      expect(await h.countRows()).toBe(0);
    });

    it('drops each partition once when 3 instances reap at the same time', async () => {
      for (let i = 0; i < 20; i += 1) await claimed(newId(), { ttlMs: SHORT_MS });
      expect(await reapUntil([store, h.anotherInstance(), h.anotherInstance()], 20, patienceMs)).toBe(20);
      expect(await h.countRows()).toBe(0);
    });

    itEach(it)([
      ['batchSize 0', 0, undefined],
      ['nowMs -1', 10, -1],
    ])('rejects %s with a RangeError', async (_name, batchSize, nowMs) => {
      await expect(store.deleteExpired(batchSize, nowMs)).rejects.toThrow(RangeError);
    });
  });
}
