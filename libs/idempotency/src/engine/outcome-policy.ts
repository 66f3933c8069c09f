/** Statuses that say "try again later": never stored, whatever the policy (docs/contract.md B.7 rule 17). */
const TRANSIENT_CLIENT_STATUSES = new Set([408, 423, 425, 429]);

/** The parts of the policy the outcome decision reads. */
export interface OutcomePolicy {
  storeServerErrors: boolean;
  storeClientErrors: boolean;
}

/** What the handler (or a thrown `IdempotencyFinalException` / `IdempotencyTransientException`) forced. */
export type OutcomeOverride = 'store' | 'release';

/**
 * Whether a response ends the key's life (`store`: later retries replay it) or frees the key
 * (`release`: a retry runs the handler again). docs/contract.md B.7 rules 17–20.
 */
export function decideOutcome(statusCode: number, policy: OutcomePolicy, override?: OutcomeOverride): OutcomeOverride {
  if (override) return override;
  if (TRANSIENT_CLIENT_STATUSES.has(statusCode)) return 'release';
  if (statusCode >= 500) return policy.storeServerErrors ? 'store' : 'release';
  if (statusCode >= 400) return policy.storeClientErrors ? 'store' : 'release';
  return 'store';
}
