import { IdempotencyError } from './idempotency.error.js';

/**
 * The claim a transaction was opened for no longer owns its record: its lease lapsed and another
 * request took it over (fencing). The transaction is rolled back, so its business writes never
 * commit.
 *
 * @publicApi
 */
export class IdempotencyClaimLostError extends IdempotencyError {
  constructor(readonly keyHash: string) {
    super(`The idempotency claim on key ${keyHash} was lost to a newer claim; its transaction was rolled back.`);
  }
}
