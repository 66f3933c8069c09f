export { IdempotentConsumer } from './idempotent-consumer.decorator.js';
export { IdempotentConsumerInterceptor } from './idempotent-consumer.interceptor.js';
export { IdempotencyConsumerContext } from './idempotency-consumer-context.decorator.js';
export { IDEMPOTENT_CONSUMER_METADATA, IdempotentConsumerHandler } from './idempotent-consumer.metadata.js';
export { consumerRunRequest } from './consumer-run-request.js';
export { IdempotentConsumerKeyError } from './idempotent-consumer-key.error.js';
export type { ConsumerIdempotencyOptions, IdempotentConsumerOptions } from './idempotent-consumer.options.js';
