import { IdempotencyError } from './idempotency.error.js';

/**
 * A stored record exists but its response cannot be read: it is encrypted under a key that is
 * not in the ring, its authentication tag does not verify (tampered, or moved from another
 * record), or it is not encrypted while the module requires encryption. The engine fails closed:
 * the handler is not run again and nothing is replayed. HTTP routes answer
 * `500 idempotency-record-unreadable`; `IdempotencyService.run()` rejects with this error.
 *
 * Not an `IdempotencyStoreError`: `onStoreError: 'fail-open'` must not run a handler whose
 * first execution may have taken effect.
 *
 * @publicApi
 */
export class IdempotencyRecordUnreadableError extends IdempotencyError {
  constructor(
    message: string,
    /** Why: the envelope's key id is not in the ring, it does not verify, or it is not encrypted. */
    readonly reason: 'unknown-key' | 'not-authentic' | 'malformed' | 'not-encrypted' | 'no-cipher',
  ) {
    super(message);
  }
}
