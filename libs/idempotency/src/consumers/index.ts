/**
 * `nestjs-idempotency/consumers`: message handlers of Nest microservices (`@EventPattern`,
 * `@MessagePattern`) handled once per message. Needs no import of `@nestjs/microservices` itself.
 *
 * @publicApi
 */
export { IdempotentConsumer } from './idempotent-consumer.decorator.js';
export { IdempotentConsumerInterceptor } from './idempotent-consumer.interceptor.js';
export { IdempotencyConsumerContext } from './idempotency-consumer-context.decorator.js';
export { IdempotentConsumerKeyError } from './idempotent-consumer-key.error.js';
export type { ConsumerIdempotencyOptions, IdempotentConsumerOptions } from './idempotent-consumer.options.js';
