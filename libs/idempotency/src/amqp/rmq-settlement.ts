import type { Channel, ConsumeMessage } from 'amqplib';
import type { MessageSettlement } from '../consumers/message-settlement.js';
import { amqpMessageKey } from './amqp-message-key.js';
import { AmqpSettler, type AmqpSettlerOptions } from './amqp-settler.js';

/**
 * What the adapter reads of Nest's `RmqContext` (`@nestjs/microservices`), without importing it:
 * the amqplib message and the channel it came on (typed loosely there, as here).
 *
 * @publicApi
 */
export interface RmqContextLike {
  // Nest's own signatures: `unknown` would stop an inferred context from reading or acking the message.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as RmqContext.getMessage()
  getMessage(): Record<string, any>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as RmqContext.getChannelRef()
  getChannelRef(): any;
}

/**
 * The settlement of `@IdempotentConsumer()` on Nest's RabbitMQ transport with `noAck: false`:
 * every message is acknowledged on the channel it came from, exactly once, after `run()`:
 * handled or a duplicate → `ack`; an in-progress duplicate or a transient failure → the retry
 * queue, back after a delay; poison → the dead-letter queue with its reason. See
 * `idempotentAmqpHandler()` for the rules, and `amqpQueueArguments()` for the queue's own
 * `queueOptions`. Without `queue`, each message is settled for the queue it was delivered from
 * (read from the delivery), so a decorator needs no configuration value.
 *
 * @example
 * @EventPattern('order.created')
 * @IdempotentConsumer<OrderCreated, RmqContext>({ consumer: 'mailer.order-created', key: rmqMessageKey,
 *   settlement: rmqSettlement({ queue: 'order-events' }) })
 * async onOrderCreated(@Payload() event: OrderCreated) { ... }
 * @publicApi
 */
export function rmqSettlement(options: AmqpSettlerOptions = {}): MessageSettlement<unknown, RmqContextLike> {
  const settler = new AmqpSettler(options);
  return {
    settle: (disposition, { context, consumer, error }) =>
      settler.settle(context.getChannelRef() as Channel, context.getMessage() as ConsumeMessage, disposition, {
        consumer,
        error,
      }),
  };
}

/**
 * A `key` for `@IdempotentConsumer()` on the RabbitMQ transport: the message's `idempotency-key`
 * header (the producer's `derivedKey()`), else its `messageId` property.
 *
 * @publicApi
 */
export function rmqMessageKey(_data: unknown, context: RmqContextLike): string | undefined {
  return amqpMessageKey(context.getMessage() as ConsumeMessage);
}
