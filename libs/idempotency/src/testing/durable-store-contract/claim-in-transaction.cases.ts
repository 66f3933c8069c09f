import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { expect } from '../contract-expect.js';
import { claimRequest, newId, sleep } from '../contract-fixtures.js';
import type { ContractTestRunner } from '../contract-runner.js';
import { elapsed } from './durable-helpers.js';
import { sampleResponse, SHORT_MS, type DurableStoreUnderTest, type DurableSuite } from './durable-suite.js';

/**
 * The durable-tier contract's `claimInTransaction` cases (an optional method): the claim is the
 * first statement of an open transaction, completed and committed in it, never committed
 * `in_progress`; a duplicate waits for it (row locks: at most the lock timeout, then `busy`).
 * A store without the method gets one case instead: the engine then falls back to `claim` +
 * `transaction()`, which the rest of the suite covers.
 *
 * @internal
 */
export function describeClaimInTransaction(
  { describe, it, beforeEach }: ContractTestRunner,
  suite: DurableSuite,
): void {
  const { claimed, completed } = suite;
  describe('claimInTransaction (optional)', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });
    /** The store's method, or a skip: the optional method is judged only where it exists. */
    const open = (target: DurableIdempotencyStore, key: string, request = claimRequest()) => {
      if (!target.claimInTransaction) throw new Error('claimInTransaction is not implemented');
      return target.claimInTransaction(key, request);
    };
    const implemented = () => typeof store.claimInTransaction === 'function';

    it('is either absent (the engine falls back to claim + transaction()) or a function', () => {
      expect(['undefined', 'function'].includes(typeof store.claimInTransaction)).toBe(true);
    });

    if (suite.claimIsolation === 'read-committed') {
      it('refuses a claim at an isolation level above READ COMMITTED, and writes nothing', async () => {
        if (!implemented()) return;
        const key = newId();
        for (const isolationLevel of ['REPEATABLE READ', 'SERIALIZABLE'] as const) {
          await expect(store.claimInTransaction!(key, claimRequest(), { isolationLevel })).rejects.toThrow(
            /READ COMMITTED/,
          );
        }
        expect(await store.get(key)).toBeUndefined();
        expect(await h.countRows()).toBe(0);
      });
    } else {
      it('takes DurableTransactionOptions (isolationLevel, label): a SERIALIZABLE claim commits its write and completion as any other', async () => {
        if (!implemented()) return;
        const key = newId();
        const result = await store.claimInTransaction!(key, claimRequest(), {
          isolationLevel: 'SERIALIZABLE',
          label: 'contract.serializable',
        });
        if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
        const { transaction } = result;
        const business = newId();
        await transaction.savepoint();
        await transaction.run(() => h.writeBusinessRow(transaction, business));
        expect(await transaction.complete(sampleResponse())).toBe(true);
        await transaction.commit();
        expect(await h.businessRowExists(business)).toBe(true);
        expect((await store.get(key))?.state).toBe('completed');
      });
    }

    it('isSerializationFailure, where implemented, says no to an error that is not one', () => {
      if (store.isSerializationFailure === undefined) return;
      expect(store.isSerializationFailure(new Error('connection refused'))).toBe(false);
      expect(store.isSerializationFailure(undefined)).toBe(false);
    });

    it('claims in an open transaction; the business write and the completion commit together, once', async () => {
      if (!implemented()) return;
      const key = newId();
      const request = claimRequest();
      const result = await open(store, key, request);
      if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
      const { transaction } = result;
      expect(transaction.record).toMatchObject({
        state: 'in_progress',
        ownerToken: request.ownerToken,
        fingerprint: request.fingerprint,
        fencingToken: 1,
      });
      const business = newId();
      await transaction.savepoint();
      await transaction.run(() => h.writeBusinessRow(transaction, business));
      expect(await transaction.complete(sampleResponse())).toBe(true);
      await transaction.commit();
      await transaction.rollback(); // a no-op once committed
      expect(await h.businessRowExists(business)).toBe(true);
      expect(await store.get(key)).toEqual({ ...transaction.record, state: 'completed', response: sampleResponse() });
    });

    it('row locks: nobody else sees the uncommitted claim (get answers undefined); the rollback leaves no row and frees the key', async () => {
      if (!implemented()) return;
      const key = newId();
      const result = await open(store, key);
      if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
      const business = newId();
      await result.transaction.run(() => h.writeBusinessRow(result.transaction, business));
      if (h.locking === 'row-locks') expect(await h.anotherInstance().get(key)).toBeUndefined();
      await result.transaction.rollback();
      expect(await h.businessRowExists(business)).toBe(false);
      expect(await store.get(key)).toBeUndefined();
      expect((await store.claim(key, claimRequest())).kind).toBe('claimed');
    });

    it("the savepoint's undo drops the handler's writes and keeps the claim, which completes in the same transaction", async () => {
      if (!implemented()) return;
      const key = newId();
      const result = await open(store, key);
      if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
      const { transaction } = result;
      const undo = await transaction.savepoint();
      const business = newId();
      await transaction.run(() => h.writeBusinessRow(transaction, business));
      await undo();
      expect(await transaction.complete(sampleResponse({ statusCode: 402 }))).toBe(true);
      await transaction.commit();
      expect(await h.businessRowExists(business)).toBe(false);
      expect(await store.get(key)).toMatchObject({ state: 'completed', response: { statusCode: 402 } });
    });

    it('a completed row, or a committed in_progress row, is returned as existing (with nowMs) and nothing stays open', async () => {
      if (!implemented()) return;
      const done = newId();
      const doneRecord = await completed(done);
      const answer = await open(store, done);
      expect(answer).toEqual({ kind: 'existing', record: doneRecord, nowMs: expect.any(Number) });
      const running = newId();
      const runningRecord = await claimed(running);
      const second = await open(store, running);
      expect(second.kind).toBe('existing');
      if (second.kind === 'existing') {
        expect(second.record).toEqual(runningRecord);
        expect(second.nowMs).toBeLessThan(runningRecord.leaseExpiresAtMs);
      }
      // Nothing was left open: the store still answers at once (sql.js: its exclusive section is free).
      expect((await store.claim(newId(), claimRequest())).kind).toBe('claimed');
    });

    it('an expired row is replaced in the transaction (fencing + 1)', async () => {
      if (!implemented()) return;
      const key = newId();
      const old = await claimed(key, { leaseMs: SHORT_MS, ttlMs: SHORT_MS });
      await sleep(SHORT_MS + 30);
      const result = await open(store, key);
      if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
      expect(result.transaction.record.fencingToken).toBe(old.fencingToken + 1);
      expect(await result.transaction.complete(sampleResponse())).toBe(true);
      await result.transaction.commit();
      expect(await store.get(key)).toMatchObject({ state: 'completed', fencingToken: old.fencingToken + 1 });
    });

    it('a duplicate waits for the open claim: row locks answer busy after the lock timeout, then existing once it committed; exclusive waits for the commit', async () => {
      if (!implemented()) return;
      const key = newId();
      const first = await open(store, key);
      if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
      const lockTimeoutMs = 200;
      if (h.locking === 'row-locks') {
        const { ms, value } = await elapsed(() => open(h.anotherInstance({ lockTimeoutMs }), key));
        expect(value).toEqual({ kind: 'busy' });
        expect(ms).toBeGreaterThanOrEqual(lockTimeoutMs - 10);
        const waiting = open(h.anotherInstance({ lockTimeoutMs: 10_000 }), key);
        await sleep(100);
        expect(await first.transaction.complete(sampleResponse())).toBe(true);
        await first.transaction.commit();
        const after = await waiting;
        expect(after.kind).toBe('existing');
        if (after.kind === 'existing') expect(after.record.state).toBe('completed');
      } else {
        const waiting = open(h.anotherInstance({ lockTimeoutMs }), key);
        await sleep(lockTimeoutMs + 100);
        expect(await first.transaction.complete(sampleResponse())).toBe(true);
        await first.transaction.commit();
        const after = await waiting;
        expect(after.kind).toBe('existing');
        if (after.kind === 'existing') expect(after.record.state).toBe('completed');
      }
    });

    it('a duplicate waiting on a claim that rolls back inserts its own', async () => {
      if (!implemented()) return;
      const key = newId();
      const first = await open(store, key);
      if (first.kind !== 'claimed') throw new Error(`expected claimed, got ${first.kind}`);
      const second = claimRequest();
      const waiting = open(h.anotherInstance({ lockTimeoutMs: 10_000 }), key, second);
      await sleep(100);
      await first.transaction.rollback();
      const after = await waiting;
      if (after.kind !== 'claimed') throw new Error(`expected claimed, got ${after.kind}`);
      expect(after.transaction.record.ownerToken).toBe(second.ownerToken);
      await after.transaction.rollback();
    });

    it('the owner renews its open claim from inside the transaction (extend answers true, nothing waits)', async () => {
      if (!implemented()) return;
      const key = newId();
      const request = claimRequest();
      const result = await open(store, key, request);
      if (result.kind !== 'claimed') throw new Error(`expected claimed, got ${result.kind}`);
      expect(await store.extend(key, request.ownerToken, 5_000)).toBe(true);
      await result.transaction.rollback();
      expect(await store.get(key)).toBeUndefined();
    });
  });
}
