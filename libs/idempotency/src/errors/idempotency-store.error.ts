import { IdempotencyError } from './idempotency.error.js';

/**
 * A store could not be reached, or answered something this library cannot read. The engine
 * turns it into `503 idempotency-store-unavailable` (fail-closed) and never runs the handler.
 *
 * @publicApi
 */
export class IdempotencyStoreError extends IdempotencyError {
  constructor(
    message: string,
    /** Which tier failed. */
    readonly tier: 'fast' | 'durable' = 'fast',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
