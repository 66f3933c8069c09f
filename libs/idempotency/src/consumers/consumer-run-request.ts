import type { RunRequest } from '../engine/idempotency-engine.types.js';
import { IdempotentConsumerKeyError } from './idempotent-consumer-key.error.js';
import type { ConsumerIdempotencyOptions } from './idempotent-consumer.options.js';

/**
 * The `IdempotencyService.run()` request of one message: the consumer as the operation, the
 * message's key, fingerprint and tenant. Throws `IdempotentConsumerKeyError` when the message
 * has no key. Shared by the adapters (microservice interceptor, BullMQ processor).
 */
export function consumerRunRequest<TMessage, TArgs extends unknown[]>(
  options: ConsumerIdempotencyOptions<TMessage, TArgs>,
  message: TMessage,
  ...args: TArgs
): RunRequest {
  const key = options.key(message, ...args);
  if (typeof key !== 'string' || key.length === 0) {
    throw new IdempotentConsumerKeyError(options.consumer);
  }
  return {
    operation: options.consumer,
    key,
    tenant: options.tenant?.(message, ...args),
    fingerprint: options.fingerprint?.(message, ...args),
    options: options.options,
  };
}
