import { IdempotencyError } from './idempotency.error.js';

/**
 * Why `IdempotencyService.run()` did not run the function nor return a replayed value:
 * - `key-reused`: the key was used with another fingerprint (a different message under the same id);
 * - `in-progress`: the original still runs: hand the message back for redelivery after `retryAfterSeconds`;
 * - `replay-unavailable`: the original completed but its result was too large to store;
 * - `outcome-unknown`: the original died and `staleLock: 'fail'` recorded its outcome as unknown;
 * - `replayed-failure`: the original failed with an error the outcome policy stores
 *   (`status`, `body`): the same failure is reported again, without running anything;
 * - `result-unencodable`: the function ran now, but its value cannot be stored as JSON (a
 *   `BigInt`, a cycle): the key is completed without a result (retries get `replay-unavailable`),
 *   so the effect is never repeated. Return a plain, JSON-safe value instead.
 *
 * @publicApi
 */
export type IdempotencyRunErrorKind =
  'key-reused' | 'in-progress' | 'replay-unavailable' | 'outcome-unknown' | 'replayed-failure' | 'result-unencodable';

/** @publicApi */
export class IdempotencyRunError extends IdempotencyError {
  constructor(
    readonly kind: IdempotencyRunErrorKind,
    message: string,
    readonly details: { retryAfterSeconds?: number; status?: number; body?: unknown } = {},
  ) {
    super(message);
  }

  /** True when retrying later with the same key can succeed (`in-progress`). */
  get retryable(): boolean {
    return this.kind === 'in-progress';
  }
}
