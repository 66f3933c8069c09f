import { HttpException } from '@nestjs/common';

/**
 * Throw from a handler to answer with this error AND store it as the final, replayable result
 * of the key, whatever the outcome policy says of its status (docs/contract.md B.7 rule 19).
 *
 * @example throw new IdempotencyFinalError({ type: '...', title: 'Card declined', status: 402 }, 402);
 * @publicApi
 */
export class IdempotencyFinalError extends HttpException {
  readonly idempotencyOutcome = 'store' as const;
}

/**
 * Throw from a handler to answer with this error and RELEASE the key, so a retry with the same
 * key runs the handler again (Adyen's transient flag, docs/contract.md B.7 rule 19).
 *
 * @example throw new IdempotencyTransientError({ title: 'Upstream busy' }, 503);
 * @publicApi
 */
export class IdempotencyTransientError extends HttpException {
  readonly idempotencyOutcome = 'release' as const;
}

/** The outcome a thrown error forces, if it is one of ours. */
export function forcedOutcomeOf(error: unknown): 'store' | 'release' | undefined {
  if (error instanceof IdempotencyFinalError || error instanceof IdempotencyTransientError) {
    return error.idempotencyOutcome;
  }
  return undefined;
}
