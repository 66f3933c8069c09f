/**
 * `nestjs-idempotency/testing`: the contract suites a store must pass, for authors of their own
 * `IdempotencyStore` or `DurableIdempotencyStore`. They run under any test runner that has
 * `describe`, `it`, `beforeEach` and `afterEach` (Jest, Vitest, Mocha, `node:test`) and assert
 * with `node:assert` errors, against a real instance of the store (real timers, short TTLs).
 *
 * @example
 * // my-store.contract.spec.ts (Jest or Vitest with globals)
 * import { describeStoreContract } from 'nestjs-idempotency/testing';
 * describeStoreContract('MyStore', async () => {
 *   const store = new MyStore(await connectToACleanDatabase());
 *   return { store, cleanup: () => store.close() };
 * });
 * @publicApi
 */
export type { ContractTestRunner } from './contract-runner.js';
export { describeStoreContract, type StoreUnderTest } from './store-contract.js';
export { claimRequest, newFingerprint, newId, newToken, NON_UTF8_BODY, sampleResponse } from './contract-fixtures.js';
export {
  describeDurableStoreContract,
  ROW_DAMAGES,
  type DurableContractOptions,
  type DurableStoreUnderTest,
  type RowDamage,
} from './durable-store-contract.js';
