import { IdempotencyError } from './idempotency.error.js';

/**
 * The module or a route is configured in a way that cannot keep the contract (for example
 * `ttlMs < 2 × leaseMs`, or a scope that cannot be resolved). Raised at startup where possible.
 *
 * @publicApi
 */
export class IdempotencyConfigurationError extends IdempotencyError {
  constructor(message: string) {
    super(`Idempotency configuration: ${message}`);
  }
}
