import { IdempotencyClaimLostError } from '../../errors/idempotency-claim-lost.error.js';
import type { IdempotencyRecord } from '../../interfaces/idempotency-record.interface.js';
import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import type { ClaimRequest } from '../../stores/idempotency-store.js';
import { expect } from '../contract-expect.js';
import { claimRequest, newId, sleep } from '../contract-fixtures.js';
import type { ContractTestRunner } from '../contract-runner.js';
import { countedWork, elapsed, signal } from './durable-helpers.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest } from './durable-suite.js';

/**
 * Row-lock behaviour (PostgreSQL): registered for every store, each test first asks the harness
 * whether it locks rows, and for an exclusive store checks the exclusive equivalent instead, so
 * nothing is skipped.
 */
export function describeRowLocks(
  { describe, it }: ContractTestRunner,
  harness: () => DurableStoreUnderTest,
  storeOf: () => DurableIdempotencyStore,
  claimed: (key: string, overrides?: Partial<ClaimRequest>) => Promise<IdempotencyRecord>,
  /** `deleteExpired` deletes rows (not whole time partitions, whose cases are in partitions.cases.ts). */
  deletesRows = true,
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
      expect(await store.get(key)).toMatchObject({
        state: 'completed',
        ownerToken: record.ownerToken,
        fencingToken: 1,
      });
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

    // A store that drops whole partitions never deletes a row of the current one (partitions.cases.ts).
    if (deletesRows) {
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
    }

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
