import type { MessageDisposition } from './message-disposition.js';

/** What a settlement knows of the message it settles. @publicApi */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same defaults as IdempotentConsumerOptions
export interface SettlementInput<TData = any, TContext = any> {
  /** The consumer's name (`IdempotentConsumerOptions.consumer`). */
  consumer: string;
  data: TData;
  /** The transport's context (`RmqContext`, ...). */
  context: TContext;
  /** What `run()` threw, when it did. */
  error?: unknown;
}

/**
 * Settles a message with its broker, for transports with manual acknowledgements: acknowledges
 * it, hands it back for a later redelivery, or dead-letters it, as `disposition` says. With a
 * settlement, `@IdempotentConsumer()` reports failures to the broker instead of throwing them
 * to the transport. `rmqSettlement()` of `nestjs-idempotency/amqp` is the one for RabbitMQ.
 *
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same defaults as IdempotentConsumerOptions
export interface MessageSettlement<TData = any, TContext = any> {
  settle(disposition: MessageDisposition, input: SettlementInput<TData, TContext>): Promise<void>;
}
