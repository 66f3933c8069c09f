import { IdempotencyOutcomeRoute } from '../idempotency.metadata.js';
import type { OutcomeOverride } from '../engine/outcome-policy.js';

/**
 * Forces what becomes of every response of a route: `store` (replayed to retries, whatever its
 * status) or `release` (a retry runs the handler again). docs/contract.md B.7 rule 19. For a single
 * response, throw `IdempotencyFinalException` / `IdempotencyTransientException` or call
 * `IdempotencyContextRef.setOutcome()` instead.
 *
 * @publicApi
 */
export const IdempotencyOutcome = (outcome: OutcomeOverride) => IdempotencyOutcomeRoute(outcome);
