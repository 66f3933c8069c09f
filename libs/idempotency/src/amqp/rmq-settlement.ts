import type { Channel, ConsumeMessage } from 'amqplib';
import type { MessageSettlement, SettlementSetup } from '../consumers/message-settlement.js';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { amqpMessageKey } from './amqp-message-key.js';
import type { AmqpRedeliveryOptions } from './amqp-redelivery.options.js';
import { requeueAfterFailure } from './amqp-settle-fallback.js';
import { AmqpSettler } from './amqp-settler.js';

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
 * Options of `rmqSettlement()`: the `AmqpRedeliveryOptions` of the consumed queue, whose name
 * may come from the application's configuration: a function of its providers, called once at
 * startup.
 *
 * @publicApi
 */
export interface RmqSettlementOptions extends Omit<AmqpRedeliveryOptions, 'queue'> {
  /**
   * The queue the consumer reads (the `queue` of its `Transport.RMQ` options), or a function
   * that reads it from the application's providers at startup. Required: a message that came
   * through an exchange does not say which queue it was read from.
   */
  queue: string | ((app: SettlementSetup) => string);
}

const missingQueue = (given: unknown) =>
  new IdempotencyConfigurationError(
    `settlement: rmqSettlement() needs \`queue\`, the queue this consumer reads (the \`queue\` of its Transport.RMQ options), got ${String(given)}: ` +
      "rmqSettlement({ queue: 'orders' }), or rmqSettlement({ queue: (app) => app.get(CONFIG).queue }) to read it from a provider.",
  );

/** The settlement of one queue on Nest's RMQ transport. */
function settlementOn(settler: AmqpSettler): MessageSettlement<unknown, RmqContextLike> {
  return {
    settle: (disposition, { context, consumer, error }) =>
      settler.settle(context.getChannelRef() as Channel, context.getMessage() as ConsumeMessage, disposition, {
        consumer,
        error,
      }),
  };
}

/**
 * The settlement of `@IdempotentConsumer()` on Nest's RabbitMQ transport with `noAck: false`:
 * every message is acknowledged on the channel it came from, exactly once, after `run()`:
 * handled or a duplicate → `ack`; an in-progress duplicate or a transient failure → the retry
 * queue, back after a delay; poison → the dead-letter queue with its reason. A settlement that
 * cannot be carried out (a republish the broker refuses, a channel error) is nacked back to the
 * queue instead, logged and counted (`AmqpSettler`). See `idempotentAmqpHandler()` for the
 * rules, and `amqpQueueArguments()` for the queue's own `queueOptions`.
 *
 * `queue` is required and checked when the application starts (`IdempotencyModule` prepares
 * every consumer's settlement): without it, the application does not start.
 *
 * @example
 * @EventPattern('order.created')
 * @IdempotentConsumer<OrderCreated, RmqContext>({ consumer: 'mailer.order-created', key: rmqMessageKey,
 *   settlement: rmqSettlement({ queue: 'order-events' }) })
 * async onOrderCreated(@Payload() event: OrderCreated) { ... }
 * @publicApi
 */
export function rmqSettlement(options: RmqSettlementOptions): MessageSettlement<unknown, RmqContextLike> {
  const { queue } = options ?? {};
  const settlerOf = (name: unknown) => {
    if (typeof name !== 'string' || name.length === 0) throw missingQueue(name);
    return new AmqpSettler({ ...options, queue: name });
  };
  // A fixed queue is used as it is; a function of the application, or its absence, is dealt with at startup.
  const fixed = typeof queue === 'string' && queue.length > 0 ? settlerOf(queue) : undefined;
  return {
    prepare: (app) => settlementOn(fixed ?? settlerOf(typeof queue === 'function' ? queue(app) : queue)),
    settle: async (disposition, input) => {
      if (fixed) return settlementOn(fixed).settle(disposition, input);
      // Never prepared (no IdempotencyModule checked it at startup): no queue to settle for.
      await requeueAfterFailure(
        input.context.getChannelRef() as Channel,
        input.context.getMessage() as ConsumeMessage,
        {
          consumer: input.consumer,
          action: disposition.action,
          error:
            typeof queue === 'function'
              ? new Error('rmqSettlement() was not prepared at startup')
              : missingQueue(queue),
          delayMs: options?.retryDelayMs ?? 1_000,
        },
      );
    },
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
