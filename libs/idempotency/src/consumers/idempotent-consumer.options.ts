import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';
import type { MessageSettlement } from './message-settlement.js';

/**
 * What every message adapter needs to deduplicate a message: who consumes it, how to name it,
 * and the policy. `TMessage` is what the adapter hands over (a microservice payload and its
 * transport context, a BullMQ job), `TArgs` the adapter's extra arguments.
 *
 * @publicApi
 */
export interface ConsumerIdempotencyOptions<TMessage, TArgs extends unknown[] = []> {
  /**
   * The consumer's name, e.g. `'billing.order-created'`: the operation part of the scope. Two
   * consumers of one event each handle it once; one consumer handles it once whichever
   * instance, queue or partition it arrives on.
   */
  consumer: string;
  /**
   * The message's identity: an event id, a message id, a header, a job id. Never a broker
   * offset or a delivery tag (they change on redelivery). An empty or missing key is an
   * `IdempotentConsumerKeyError` and the handler does not run.
   */
  key: (message: TMessage, ...args: TArgs) => string | undefined;
  /**
   * What a redelivery must repeat exactly, e.g. the serialized payload: the same key with
   * another fingerprint is refused (`IdempotencyRunError` `key-reused`) instead of skipped.
   * @default none: the key alone identifies the message
   */
  fingerprint?: (message: TMessage, ...args: TArgs) => string | Buffer;
  /** The tenant the key belongs to, when message ids are unique per tenant only. @default none */
  tenant?: (message: TMessage, ...args: TArgs) => string | undefined;
  /**
   * Policy of these runs over the module's: `leaseMs`, `ttlMs`, `durable`, `transactional`,
   * `inProgress` (`{ mode: 'wait' }` waits for the original instead of handing the duplicate
   * back), `storeServerErrors`, `storeClientErrors`, `staleLock`. HTTP-only options are ignored.
   * @default the module's options
   */
  options?: IdempotentOptions;
}

/**
 * Options of `@IdempotentConsumer()` on a Nest microservice handler (`@EventPattern` /
 * `@MessagePattern`). `data` is the payload, `context` the transport's context
 * (`RedisContext`, `KafkaContext`, `RmqContext`, ...).
 *
 * @example
 * @EventPattern('order.created')
 * @IdempotentConsumer({ consumer: 'billing.order-created', key: (data: OrderCreated) => data.eventId })
 * handle(@Payload() data: OrderCreated) { ... }
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- untyped like Nest's @Payload() data and its transport contexts
export interface IdempotentConsumerOptions<TData = any, TContext = any> extends ConsumerIdempotencyOptions<
  TData,
  [context: TContext]
> {
  /**
   * Called when a duplicate is acknowledged without running the handler, e.g. to `ack` it on a
   * transport with manual acknowledgements (RabbitMQ with `noAck: false`).
   * @default none
   */
  onDuplicate?: (data: TData, context: TContext) => void | Promise<void>;
  /**
   * Turns what `run()` threw into what the transport should see: e.g. an in-progress
   * `IdempotencyRunError` (`retryable: true`) into a `KafkaRetriableException`, or any error into
   * an `RpcException` so that a `@MessagePattern` client receives its details (Nest sends other
   * errors as "Internal server error").
   * @default the error as thrown
   */
  mapError?: (error: unknown, data: TData, context: TContext) => unknown;
  /**
   * Settles every message with its broker, on transports with manual acknowledgements: e.g.
   * `rmqSettlement({ queue })` of `nestjs-idempotency/amqp` for RabbitMQ with `noAck: false`
   * (ack a handled message or a duplicate, redeliver an in-progress duplicate or a transient
   * failure after a delay, dead-letter a poison message). With a settlement, failures are
   * reported to the broker and not thrown to the transport (`mapError` is not used).
   * @default none: the transport acknowledges as it does for any handler
   */
  settlement?: MessageSettlement<TData, TContext>;
}
