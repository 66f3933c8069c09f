import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { ClaimRequest, IdempotencyStore } from '../stores/idempotency-store.js';
import { claimedIn, completedIn, sampleResponse } from './contract-fixtures.js';
import { resolveRunner, type ContractTestRunner } from './contract-runner.js';
import { describeClaim, describeTakeOver } from './store-contract/claim.cases.js';
import { describeComplete, describeExtend, describeRelease } from './store-contract/complete-release-extend.cases.js';
import { describeGet, describeRestore } from './store-contract/get-restore.cases.js';
import { SHORT_MS, type StoreSuite } from './store-contract/store-suite.js';
import { describeInspection, describeWaitForChange } from './store-contract/wait-inspect.cases.js';

/**
 * The fast-tier contract (`IdempotencyStore`, stores/idempotency-store.ts), as a suite any
 * implementation must pass. Real timers and short TTLs: expiry and leases are measured by the
 * store's own clock (Redis `TIME` for Redis), never faked.
 *
 * @publicApi
 */
export interface StoreUnderTest {
  store: IdempotencyStore;
  /** Closes what the factory opened and removes the records the test wrote. */
  cleanup(): Promise<void>;
}

/**
 * Registers the contract suite for one store. `makeStore` runs before every test and must give
 * a store with no records (a fresh instance or a fresh key prefix). `runner` is your test
 * runner's `describe`, `it`, `beforeEach` and `afterEach`; without it, its globals are used.
 *
 * @example
 * describeStoreContract('my store', async () => {
 *   const store = new MyStore(await connect());
 *   return { store, cleanup: () => store.close() };
 * });
 * @publicApi
 */
export function describeStoreContract(
  name: string,
  makeStore: () => Promise<StoreUnderTest>,
  runner?: ContractTestRunner,
): void {
  const resolved = resolveRunner(runner);
  const { describe, beforeEach, afterEach } = resolved;
  describe(`IdempotencyStore contract: ${name}`, () => {
    let store: IdempotencyStore;
    let cleanup: (() => Promise<void>) | undefined;

    beforeEach(async () => {
      ({ store, cleanup } = await makeStore());
    });
    afterEach(async () => {
      await cleanup?.();
      cleanup = undefined;
    });

    const claimed = (key: string, overrides: Partial<ClaimRequest> = {}) => claimedIn(store, key, overrides);
    const completed = (key: string, response: StoredResponse = sampleResponse()) => completedIn(store, key, response);

    const suite: StoreSuite = {
      store: () => store,
      takeOverStore: () => store,
      claimed,
      completed,
      sampleResponse,
      noun: 'record',
      shortMs: SHORT_MS,
    };
    describeClaim(resolved, suite);
    describeTakeOver(resolved, suite);
    describeComplete(resolved, suite);
    describeRelease(resolved, suite);
    describeExtend(resolved, suite);
    describeGet(resolved, suite);
    describeRestore(resolved, suite);
    describeWaitForChange(resolved, suite);
    describeInspection(resolved, suite);
  });
}
