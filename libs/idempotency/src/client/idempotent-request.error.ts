import type { IdempotencyKeySource } from './idempotency-key-source.js';
import type { StopReason } from './retry-policy.js';

/**
 * Why an idempotent call ended without an answer to return. (A call that may not be retried at
 * all, `unsafe-method`, rejects with its own error, as the wrapped client would.)
 */
export type IdempotentRequestFailure = Exclude<StopReason, 'final-answer' | 'unsafe-method'>;

/**
 * An idempotent call that got no answer: every attempt failed before a response (`cause` is the
 * last network error), or the deadline cut an attempt short. Whether the server acted is
 * unknown: call again with the same `key` (`idempotencyKey: error.key`) to learn it safely.
 *
 * @example
 * try {
 *   await pay(url, { method: 'POST', body });
 * } catch (error) {
 *   if (error instanceof IdempotentRequestError) queueForLater({ url, body, idempotencyKey: error.key });
 *   else throw error;
 * }
 * @publicApi
 */
export class IdempotentRequestError extends Error {
  override readonly name = 'IdempotentRequestError';

  constructor(
    /** What stopped the retries. */
    readonly reason: IdempotentRequestFailure,
    /** Attempts made, the first included. */
    readonly attempts: number,
    /** The key every attempt carried (undefined for a method sent without one). */
    readonly key: string | undefined,
    readonly keySource: IdempotencyKeySource | undefined,
    options: { cause?: unknown } = {},
  ) {
    super(
      `The request got no answer after ${attempts} attempt(s) (${reason})` +
        (key === undefined ? '.' : `; call again with the same Idempotency-Key to learn its outcome safely.`),
      options,
    );
  }
}
