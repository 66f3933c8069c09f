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
 * What a settlement may read of the application when it is prepared at startup: its providers
 * (looked up anywhere in the module tree), e.g. the configuration that names the queue.
 *
 * @publicApi
 */
export interface SettlementSetup {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a provider token, as ModuleRef.get() takes it
  get<T = any>(token: string | symbol | (abstract new (...args: any[]) => T)): T;
}

/**
 * Settles a message with its broker, for transports with manual acknowledgements: acknowledges
 * it, hands it back for a later redelivery, or dead-letters it, as `disposition` says. With a
 * settlement, `@IdempotentConsumer()` reports failures to the broker instead of throwing them
 * to the transport. `rmqSettlement()` of `nestjs-idempotency/amqp` is the one for RabbitMQ.
 *
 * `settle()` must not leave a message unsettled: when it cannot do what `disposition` says, it
 * falls back to a safe disposition itself (RabbitMQ: a nack with requeue). A rejection is
 * logged and counted (`idempotency.consumer.settlement_fallbacks`, outcome `unsettled`).
 *
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the same defaults as IdempotentConsumerOptions
export interface MessageSettlement<TData = any, TContext = any> {
  settle(disposition: MessageDisposition, input: SettlementInput<TData, TContext>): Promise<void>;
  /**
   * Called once per application at startup (by `IdempotencyModule`, for every
   * `@IdempotentConsumer()` handler): returns the settlement the application uses, or throws
   * (an `IdempotencyConfigurationError` that says what to fix) so that the application does not
   * start with a settlement that cannot work. @default the settlement as it is
   */
  prepare?(setup: SettlementSetup): MessageSettlement<TData, TContext>;
}
