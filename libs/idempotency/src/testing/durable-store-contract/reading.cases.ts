import { IdempotencyClaimLostError } from '../../errors/idempotency-claim-lost.error.js';
import type { DurableIdempotencyStore } from '../../stores/durable-idempotency-store.js';
import { commonGetCases } from '../common-cases.js';
import { expect } from '../contract-expect.js';
import { claimRequest, newId, sleep } from '../contract-fixtures.js';
import { itEach, type ContractTestRunner } from '../contract-runner.js';
import { countedWork, expectStoreError } from './durable-helpers.js';
import {
  ROW_DAMAGES,
  sampleResponse,
  SHORT_MS,
  type DurableStoreUnderTest,
  type DurableSuite,
  type RowDamage,
} from './durable-suite.js';

/**
 * The durable-tier contract's reading cases: `get` (expired rows, other instances), and rows
 * the store cannot read, which fail loudly instead of being taken for absent.
 *
 * @internal
 */

/** `get`: absent and expired keys, and what another instance wrote. */
export function describeGet({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed, completed } = suite;
  describe('get', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

    commonGetCases(it, suite);

    it('returns undefined once the row expired, in progress or completed, though the row is still there', async () => {
      const a = newId();
      const b = newId();
      await claimed(a, { ttlMs: SHORT_MS });
      const record = await claimed(b, { ttlMs: SHORT_MS });
      expect(await store.complete(b, record.ownerToken, sampleResponse())).toBe(true);
      expect(await store.get(a)).toBeDefined();
      await sleep(SHORT_MS + 20);
      expect(await store.get(a)).toBeUndefined();
      expect(await store.get(b)).toBeUndefined();
      expect(await h.countRows()).toBe(2);
    });

    it('reads what another instance wrote', async () => {
      const key = newId();
      const record = await completed(key);
      expect(await h.anotherInstance().get(key)).toEqual(record);
    });
  });
}

/** Unreadable rows: every operation fails with a store error or a lost claim, before any work. */
export function describeUnreadableRows({ describe, it, beforeEach }: ContractTestRunner, suite: DurableSuite): void {
  const { claimed } = suite;
  describe('unreadable rows', () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    beforeEach(() => {
      h = suite.harness();
      store = suite.store();
    });

    itEach(it)(Object.entries(ROW_DAMAGES))(
      'rejects get, claim and takeOver with IdempotencyStoreError (durable) for %s; transaction: %s, before work',
      async (damage, transactionOutcome) => {
        const key = newId();
        const record = await claimed(key);
        await h.damage(key, damage as RowDamage);
        await expectStoreError(store.get(key));
        await expectStoreError(store.claim(key, claimRequest()));
        await expectStoreError(store.takeOver(key, record.ownerToken, claimRequest()));
        const { work, calls } = countedWork(async () => 'ran');
        const transaction = store.transaction(key, record.ownerToken, work);
        if (transactionOutcome === 'claim-lost') {
          await expect(transaction).rejects.toBeInstanceOf(IdempotencyClaimLostError);
        } else {
          await expectStoreError(transaction);
        }
        expect(calls()).toBe(0);
      },
    );

    it('are left out of listInProgress, which still lists the readable rows', async () => {
      const damaged = newId();
      const readable = newId();
      await claimed(damaged);
      await claimed(readable);
      await h.damage(damaged, 'fencing token 0');
      expect((await store.listInProgress(0, 10)).map((entry) => entry.key)).toEqual([readable]);
    });

    it('names the problem and what to do in the message, without the row content', async () => {
      const key = newId();
      await claimed(key);
      await h.damage(key, 'unknown state');
      const error = await expectStoreError(store.get(key));
      expect(error.message).toMatch(/state/);
      expect(error.message).toMatch(/repair or delete/);
    });
  });
}
