import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import type { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import type { ClaimRequest } from '../stores/idempotency-store.js';
import { claimedIn, completedIn } from './contract-fixtures.js';
import { resolveRunner, type ContractTestRunner } from './contract-runner.js';
import { describeClaimInTransaction } from './durable-store-contract/claim-in-transaction.cases.js';
import { describeClaim, describeTakeOver } from './durable-store-contract/claim.cases.js';
import {
  describeComplete,
  describeExtend,
  describeRelease,
} from './durable-store-contract/complete-release-extend.cases.js';
import {
  sampleResponse,
  SHORT_MS,
  type DurableStoreUnderTest,
  type DurableSuite,
} from './durable-store-contract/durable-suite.js';
import { describeDeleteExpired, describeInspection } from './durable-store-contract/maintenance.cases.js';
import { describeGet, describeUnreadableRows } from './durable-store-contract/reading.cases.js';
import { describeDropExpiredPartitions } from './durable-store-contract/partitions.cases.js';
import { describeRowLocks } from './durable-store-contract/row-locks.cases.js';
import { describeTransaction } from './durable-store-contract/transaction.cases.js';

/**
 * `describeDurableStoreContract`: the durable-tier contract suite, put together from its cases
 * (one file per topic under `durable-store-contract/`, plus the cases both tiers share).
 */

export { ROW_DAMAGES, type DurableStoreUnderTest, type RowDamage } from './durable-store-contract/durable-suite.js';

/**
 * What the durable contract suite needs to know of a store beyond its methods.
 *
 * @publicApi
 */
export interface DurableContractOptions {
  /**
   * How `deleteExpired` removes expired records: `'rows'` (each expired row, in batches), or
   * whole time partitions of `partitionMs` (a partition goes once every row in it has expired).
   * @default 'rows'
   */
  expiry?: 'rows' | { partitionMs: number };
  /**
   * The isolation levels `claimInTransaction` takes: `'any'`, or `'read-committed'` for a store that
   * refuses a stronger one (its claim's read after a lock wait needs a fresh snapshot).
   * @default 'any'
   */
  claimIsolation?: 'any' | 'read-committed';
}

/**
 * Registers the contract suite for one durable store. `make` runs before every test. `runner` is
 * your test runner's `describe`, `it`, `beforeEach` and `afterEach`; without it, its globals are used.
 *
 * @example
 * describeDurableStoreContract('my partitioned store', async () => makeHarness(), undefined, {
 *   expiry: { partitionMs: 1_000 },
 * });
 * @publicApi
 */
export function describeDurableStoreContract(
  name: string,
  make: () => Promise<DurableStoreUnderTest>,
  runner?: ContractTestRunner,
  options: DurableContractOptions = {},
): void {
  const resolved = resolveRunner(runner);
  const { describe, beforeEach, afterEach } = resolved;
  describe(`DurableIdempotencyStore contract: ${name}`, () => {
    let h: DurableStoreUnderTest;
    let store: DurableIdempotencyStore;
    let cleanup: (() => Promise<void>) | undefined;

    beforeEach(async () => {
      h = await make();
      store = h.store;
      cleanup = h.cleanup;
    });
    afterEach(async () => {
      await cleanup?.();
      cleanup = undefined;
    });

    const claimed = (key: string, overrides: Partial<ClaimRequest> = {}) => claimedIn(store, key, overrides);
    const completed = (key: string, response: StoredResponse = sampleResponse()) => completedIn(store, key, response);

    const suite: DurableSuite = {
      harness: () => h,
      store: () => store,
      takeOverStore: () => h.anotherInstance(),
      claimed,
      completed,
      sampleResponse,
      noun: 'row',
      shortMs: SHORT_MS,
      countRows: () => h.countRows(),
      claimIsolation: options.claimIsolation ?? 'any',
    };
    describeClaim(resolved, suite);
    describeTakeOver(resolved, suite);
    describeComplete(resolved, suite);
    describeRelease(resolved, suite);
    describeExtend(resolved, suite);
    describeGet(resolved, suite);
    describeUnreadableRows(resolved, suite);
    const expiry = options.expiry ?? 'rows';
    if (expiry === 'rows') describeDeleteExpired(resolved, suite);
    else describeDropExpiredPartitions(resolved, suite, expiry.partitionMs);
    describeTransaction(resolved, suite);
    describeClaimInTransaction(resolved, suite);
    describeRowLocks(
      resolved,
      () => h,
      () => store,
      claimed,
      expiry === 'rows',
    );
    describeInspection(resolved, suite);
  });
}
