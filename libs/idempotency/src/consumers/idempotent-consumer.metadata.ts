import { Reflector } from '@nestjs/core';
import type { IdempotentConsumerOptions } from './idempotent-consumer.options.js';

/** Metadata key of `@IdempotentConsumer()`. */
export const IDEMPOTENT_CONSUMER_METADATA = 'idempotency:consumer';

/**
 * Handler metadata of `@IdempotentConsumer()`. A leaf file, so the decorator and the
 * interceptor do not import each other.
 */
export const IdempotentConsumerHandler = Reflector.createDecorator<IdempotentConsumerOptions>({
  key: IDEMPOTENT_CONSUMER_METADATA,
});
