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
export {
  messageDisposition,
  type ConsumerRunOutcome,
  type DeadLetterReason,
  type MessageDisposition,
} from './message-disposition.js';
export type { MessageSettlement, SettlementInput, SettlementSetup } from './message-settlement.js';
export { UnparsableMessage, UnparsableMessageError } from './unparsable-message.js';
export { IDEMPOTENCY_KEY_MESSAGE_HEADER } from './message-key-header.js';
