import type { IdempotencyStore } from '../../stores/idempotency-store.js';
import type { CommonCaseContext } from '../common-cases.js';

/**
 * What the fast-tier contract's cases share: their timing constants, and the suite as they see
 * it (the store of the running test and the helpers that write through it).
 *
 * @internal
 */

/** Lifetimes short enough to watch expire. */
export const SHORT_MS = 40;
/** Tolerance between the test's clock and the store's (Redis may run on another host). */
export const CLOCK_SLACK_MS = 50;
/** "Promptly": a notification, not the timeout, woke the waiter. */
export const PROMPT_MS = 500;

/** The fast-tier suite as its cases see it: `store()` is the store of the running test. */
export interface StoreSuite extends CommonCaseContext {
  store(): IdempotencyStore;
}
