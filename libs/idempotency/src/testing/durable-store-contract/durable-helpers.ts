import { IdempotencyStoreError } from '../../errors/idempotency-store.error.js';
import type { DurableTransaction } from '../../stores/durable-idempotency-store.js';
import { expect } from '../contract-expect.js';

/**
 * Small tools of the durable-tier cases: a signal from inside a transaction's work, work that
 * counts its calls, timing an action, and expecting the durable tier's store error.
 *
 * @internal
 */

/** A promise and the function that resolves it: lets a test wait for a point inside `work`. */
export function signal(): { promise: Promise<void>; fire: () => void } {
  let fire!: () => void;
  const promise = new Promise<void>((resolve) => (fire = resolve));
  return { promise, fire };
}

/** Work for `transaction()` that counts its calls (work that must never run is checked with it). */
export function countedWork<T>(body: (transaction: DurableTransaction) => Promise<T>): {
  work: (transaction: DurableTransaction) => Promise<T>;
  calls: () => number;
} {
  let calls = 0;
  return {
    work: (transaction) => {
      calls += 1;
      return body(transaction);
    },
    calls: () => calls,
  };
}

export async function elapsed<T>(action: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const start = performance.now();
  const value = await action();
  return { ms: performance.now() - start, value };
}

export async function expectStoreError(promise: Promise<unknown>): Promise<IdempotencyStoreError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(IdempotencyStoreError);
  expect((error as IdempotencyStoreError).tier).toBe('durable');
  return error as IdempotencyStoreError;
}
