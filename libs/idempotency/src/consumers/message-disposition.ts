import { IdempotencyRunError } from '../errors/idempotency-run.error.js';
import type { OutcomeOverride } from '../engine/outcome-policy.js';
import { IdempotentConsumerKeyError } from './idempotent-consumer-key.error.js';
import { UnparsableMessageError } from './unparsable-message.js';

/** Why a message goes to the dead-letter queue. @publicApi */
export type DeadLetterReason =
  'missing-key' | 'unparsable-body' | 'key-reused' | 'outcome-unknown' | 'attempts-exhausted';

/**
 * What a broker with manual acknowledgements should do with a message once `run()` has ended:
 * - `ack`: done with it: the handler ran (`handled`), or did not need to (`duplicate` of a
 *   completed message, a `stored-failure` the outcome policy keeps, a completed run whose
 *   result was not stored: `replay-unavailable`);
 * - `retry`: deliver it again later, never at once: `in-progress` (the original still runs;
 *   `retryAfterMs` is its remaining lease), or `transient-failure` (the handler failed and the
 *   key was released, or a store was unreachable);
 * - `dead-letter`: it will never succeed as it is: no key, a body that does not parse, a key
 *   reused with another payload, an outcome recorded as unknown.
 *
 * @publicApi
 */
export type MessageDisposition =
  | { action: 'ack'; reason: 'handled' | 'duplicate' | 'stored-failure' | 'replay-unavailable' }
  | { action: 'retry'; reason: 'in-progress'; retryAfterMs: number }
  | { action: 'retry'; reason: 'transient-failure' }
  | { action: 'dead-letter'; reason: DeadLetterReason };

/**
 * How one message's `run()` ended, as an adapter saw it. `handlerOutcome` is set when the
 * handler itself threw `error`: what the outcome policy made of it
 * (`IdempotencyService.failureOutcome`).
 *
 * @publicApi
 */
export type ConsumerRunOutcome =
  { ok: true; status: 'fresh' | 'replayed' } | { ok: false; error: unknown; handlerOutcome?: OutcomeOverride };

/**
 * The disposition of a message (pure). Anything not recognised (a store that is down, a
 * configuration error) is a transient failure: retried with backoff, and dead-lettered once
 * the adapter's attempts run out, so nothing loops for ever nor is lost silently.
 *
 * @publicApi
 */
export function messageDisposition(outcome: ConsumerRunOutcome): MessageDisposition {
  if (outcome.ok) {
    return { action: 'ack', reason: outcome.status === 'fresh' ? 'handled' : 'duplicate' };
  }
  if (outcome.handlerOutcome) {
    return outcome.handlerOutcome === 'store'
      ? { action: 'ack', reason: 'stored-failure' }
      : { action: 'retry', reason: 'transient-failure' };
  }
  const { error } = outcome;
  if (error instanceof IdempotentConsumerKeyError) return { action: 'dead-letter', reason: 'missing-key' };
  if (error instanceof UnparsableMessageError) return { action: 'dead-letter', reason: 'unparsable-body' };
  if (error instanceof IdempotencyRunError) {
    switch (error.kind) {
      case 'in-progress':
        return {
          action: 'retry',
          reason: 'in-progress',
          retryAfterMs: Math.max(1, error.details.retryAfterSeconds ?? 1) * 1000,
        };
      case 'replayed-failure':
        return { action: 'ack', reason: 'stored-failure' };
      case 'replay-unavailable':
        return { action: 'ack', reason: 'replay-unavailable' };
      case 'result-unencodable':
        // The handler ran now and the key is completed: its effect stands.
        return { action: 'ack', reason: 'handled' };
      case 'key-reused':
        return { action: 'dead-letter', reason: 'key-reused' };
      case 'outcome-unknown':
        return { action: 'dead-letter', reason: 'outcome-unknown' };
    }
  }
  return { action: 'retry', reason: 'transient-failure' };
}
