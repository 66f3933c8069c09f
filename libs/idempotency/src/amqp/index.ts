/**
 * `nestjs-idempotency/amqp`: RabbitMQ consumers, for Nest's RMQ transport (`rmqSettlement()` with
 * `@IdempotentConsumer()`) and for apps that use amqplib channels directly
 * (`idempotentAmqpHandler()`). The only part of the library that refers to `amqplib` (an
 * optional peer; types only at run time), so an application without RabbitMQ never loads it.
 *
 * @publicApi
 */
export * from './amqp.constants.js';
export { AmqpSettler, type AmqpSettleInput, type AmqpSettlerOptions } from './amqp-settler.js';
export type { AmqpRedeliveryOptions } from './amqp-redelivery.options.js';
export { amqpQueueArguments, amqpRetryQueueOptions, assertAmqpRedeliveryTopology } from './amqp-topology.js';
export { amqpHeader, amqpMessageKey } from './amqp-message-key.js';
export {
  idempotentAmqpHandler,
  type AmqpDelivery,
  type AmqpMessageHandler,
  type IdempotentAmqpHandlerOptions,
} from './idempotent-amqp-handler.js';
export { rmqMessageKey, rmqSettlement, type RmqContextLike, type RmqSettlementOptions } from './rmq-settlement.js';
export { RmqMessageDeserializer, type RmqIncomingPacket } from './rmq-message.deserializer.js';
