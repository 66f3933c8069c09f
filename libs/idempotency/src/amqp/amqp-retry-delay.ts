import type { MessageDisposition } from '../consumers/message-disposition.js';
import type { ResolvedAmqpRedelivery } from './amqp-redelivery.options.js';

/**
 * What to do with a message the disposition says to retry (pure): wait `delayMs` in the retry
 * queue with `attempts` recorded, or give up when a transient failure used up `maxAttempts`.
 * An in-progress duplicate is not a failure: it does not count as an attempt, and waits for the
 * original's remaining lease, so it comes back once the original has finished or died.
 *
 * @internal
 */
export function retryPlan(
  disposition: Extract<MessageDisposition, { action: 'retry' }>,
  failedAttempts: number,
  options: Pick<ResolvedAmqpRedelivery, 'retryDelayMs' | 'maxRetryDelayMs' | 'maxAttempts' | 'inProgressDelayFactor'>,
): { kind: 'retry'; delayMs: number; attempts: number } | { kind: 'give-up'; attempts: number } {
  const clamp = (ms: number) => Math.round(Math.min(Math.max(ms, options.retryDelayMs), options.maxRetryDelayMs));
  if (disposition.reason === 'in-progress') {
    return {
      kind: 'retry',
      delayMs: clamp(disposition.retryAfterMs * options.inProgressDelayFactor),
      attempts: failedAttempts,
    };
  }
  const attempts = failedAttempts + 1;
  if (attempts >= options.maxAttempts) return { kind: 'give-up', attempts };
  return { kind: 'retry', delayMs: clamp(options.retryDelayMs * 2 ** (attempts - 1)), attempts };
}

/** The attempts counter of a message's headers (0 when absent or not a count). @internal */
export function failedAttemptsOf(headers: Record<string, unknown> | undefined, header: string): number {
  const value = Number(headers?.[header]);
  return Number.isInteger(value) && value > 0 ? value : 0;
}
