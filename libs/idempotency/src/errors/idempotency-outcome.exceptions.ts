import { HttpException } from '@nestjs/common';

/**
 * Throw from a handler to answer with this error AND store it as the final, replayable result
 * of the key, whatever the outcome policy says of its status (docs/contract.md B.7 rule 19).
 *
 * @example throw new IdempotencyFinalException({ type: '...', title: 'Card declined', status: 402 }, 402);
 * @publicApi
 */
export class IdempotencyFinalException extends HttpException {
  readonly idempotencyOutcome = 'store' as const;
}

/**
 * Throw from a handler to answer with this error and RELEASE the key, so a retry with the same
 * key runs the handler again (Adyen's transient flag, docs/contract.md B.7 rule 19).
 *
 * @example throw new IdempotencyTransientException({ title: 'Upstream busy' }, 503);
 * @publicApi
 */
export class IdempotencyTransientException extends HttpException {
  readonly idempotencyOutcome = 'release' as const;
}

/**
 * @deprecated Renamed `IdempotencyFinalException` (Nest names its `HttpException` subclasses
 * `*Exception`); the old name keeps working.
 * @publicApi
 */
export const IdempotencyFinalError = IdempotencyFinalException;
/** @deprecated Renamed `IdempotencyFinalException`. */
export type IdempotencyFinalError = IdempotencyFinalException;

/**
 * @deprecated Renamed `IdempotencyTransientException` (Nest names its `HttpException` subclasses
 * `*Exception`); the old name keeps working.
 * @publicApi
 */
export const IdempotencyTransientError = IdempotencyTransientException;
/** @deprecated Renamed `IdempotencyTransientException`. */
export type IdempotencyTransientError = IdempotencyTransientException;

/** The outcome a thrown error forces, if it is one of ours. */
export function forcedOutcomeOf(error: unknown): 'store' | 'release' | undefined {
  if (error instanceof IdempotencyFinalException || error instanceof IdempotencyTransientException) {
    return error.idempotencyOutcome;
  }
  return undefined;
}
