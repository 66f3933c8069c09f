import { IdempotencyClaimLostError } from '../../errors/idempotency-claim-lost.error.js';
import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { expect } from '../contract-expect.js';
import { claimRequest, newId, newToken, sleep } from '../contract-fixtures.js';
import { itEach, type ContractTestRunner } from '../contract-runner.js';
import { countedWork, signal } from './durable-helpers.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest, type DurableSuite } from './durable-suite.js';

/**
 * The durable-tier contract's `transaction` cases: the work and the completion commit together
 * or not at all, a zombie never runs its work, and other callers never see a half-done row.
 *
 * @internal
 */

type Claimer = {
  key(): Promise<string>;
  completedKey(): Promise<{ key: string; token: string }>;
  expiredKey(): Promise<{ key: string; token: string }>;
  releasedKey(): Promise<{ key: string; token: string }>;
};

/** `transaction`: all or nothing, only for the live owner. */
export function describeTransaction({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('transaction', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

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
      await expect(store.transaction(key, record.ownerToken, () => Promise.reject('plain string'))).rejects.toBe(
        'plain string',
      );
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
}
