import type { Channel, ConsumeMessage } from 'amqplib';
import { consumerRunRequest } from '../consumers/consumer-run-request.js';
import type { ConsumerIdempotencyOptions } from '../consumers/idempotent-consumer.options.js';
import { messageDisposition, type MessageDisposition } from '../consumers/message-disposition.js';
import { UnparsableMessageError } from '../consumers/unparsable-message.js';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';
import type { RunRequest } from '../engine/idempotency-engine.types.js';
import type { IdempotencyService } from '../engine/idempotency.service.js';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { amqpMessageKey } from './amqp-message-key.js';
import type { AmqpRedeliveryOptions } from './amqp-redelivery.options.js';
import { AmqpSettler, isConfirmChannel } from './amqp-settler.js';

/** A message as the options' functions see it: the parsed body and the AMQP message. @publicApi */
export interface AmqpDelivery<TBody = unknown> {
  body: TBody;
  message: ConsumeMessage;
}

/**
 * Options of `idempotentAmqpHandler()`: who consumes (the scope), how to name a message, the
 * policy, and how to redeliver and dead-letter on `queue`.
 *
 * @publicApi
 */
export interface IdempotentAmqpHandlerOptions<TBody = unknown>
  extends Omit<ConsumerIdempotencyOptions<AmqpDelivery<TBody>>, 'key'>, AmqpRedeliveryOptions {
  /**
   * The channel the handler consumes on (`noAck: false`): acks, retries and dead letters go
   * through it. A confirm channel (`connection.createConfirmChannel()`), so that a republish the
   * broker refuses is seen (and the message requeued) instead of lost.
   */
  channel: Channel;
  /** The message's key. @default the `idempotency-key` header, else the `messageId` property (`amqpMessageKey`) */
  key?: (delivery: AmqpDelivery<TBody>) => string | undefined;
  /**
   * Turns the body into what the handler gets; a throw dead-letters the message
   * (`unparsable-body`). @default JSON that must be an object or an array
   */
  parse?: (content: Buffer, message: ConsumeMessage) => TBody;
}

/** The business logic of one message; its value is stored as the key's result. @publicApi */
export type AmqpMessageHandler<TBody = unknown, TResult = unknown> = (
  body: TBody,
  context: IdempotencyContextRef,
  message: ConsumeMessage,
) => Promise<TResult> | TResult;

function parseJson(content: Buffer): unknown {
  const value: unknown = JSON.parse(content.toString('utf8'));
  if (typeof value !== 'object' || value === null) throw new Error('the body is JSON, but not an object or an array');
  return value;
}

/**
 * A `channel.consume()` callback for apps that use amqplib directly: each message (by `key`)
 * takes effect once through `IdempotencyService.run()`, and is settled on `channel`:
 * - handled, or a duplicate of a completed message (the handler does not run): `ack`;
 * - a duplicate while the original runs: waits in the retry queue for the original's remaining
 *   lease, then comes back (and is acknowledged as a duplicate once the original completed);
 * - the handler fails: a failure the outcome policy stores (a 4xx `HttpException`,
 *   `IdempotencyFinalException`) is acknowledged, and later duplicates get it as `replayed-failure`;
 *   a released one (any other error) is retried after a backoff, and dead-lettered
 *   (`attempts-exhausted`) after `maxAttempts`;
 * - poison (no key, a body `parse` refuses, a key reused with another payload): the dead-letter
 *   queue, with the reason in `x-idempotency-dead-letter-reason`.
 * The returned function never rejects, and leaves no message unacknowledged on a live channel: a
 * message it cannot settle as decided (a republish the broker refuses, a channel error) is nacked
 * with requeue after `retryDelayMs` (on a closed channel the broker requeues it), logged and
 * counted (`idempotency.consumer.settlement_fallbacks`). Options that cannot work (no `queue`,
 * a channel without publisher confirms) throw `IdempotencyConfigurationError` when it is called.
 *
 * @example
 * await channel.consume('orders', idempotentAmqpHandler(idempotency, { channel, queue: 'orders', consumer: 'billing.order-created',
 *   options: { transactional: true } }, async (event: OrderCreated, idem) => {
 *     await idem.getManager<EntityManager>().insert(Invoice, { orderId: event.orderId });
 *   }), { noAck: false });
 * @publicApi
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- an unannotated handler reads the JSON body as JSON.parse() types it
export function idempotentAmqpHandler<TBody = any, TResult = unknown>(
  idempotency: IdempotencyService,
  options: IdempotentAmqpHandlerOptions<TBody>,
  handler: AmqpMessageHandler<TBody, TResult>,
): (message: ConsumeMessage | null) => Promise<void> {
  if (!isConfirmChannel(options.channel)) {
    throw new IdempotencyConfigurationError(
      `idempotentAmqpHandler('${options.consumer}'): channel must be a confirm channel (connection.createConfirmChannel()): on a plain channel a republish the broker refuses is lost unseen.`,
    );
  }
  const settler = new AmqpSettler(options);
  const consumerOptions: ConsumerIdempotencyOptions<AmqpDelivery<TBody>> = {
    ...options,
    key: options.key ?? ((delivery) => amqpMessageKey(delivery.message)),
  };
  // The default parser only checks for an object or an array: the handler's type says what is in it.
  const parse = options.parse ?? (parseJson as (content: Buffer) => TBody);
  return async (message) => {
    if (!message) return; // the broker cancelled the consumer
    const seen: { context?: IdempotencyContextRef; failure?: { error: unknown } } = {};
    let request: RunRequest | undefined;
    let disposition: MessageDisposition;
    let error: unknown;
    try {
      let body: TBody;
      try {
        body = parse(message.content, message);
      } catch (parseError) {
        throw new UnparsableMessageError(
          options.consumer,
          parseError instanceof Error ? parseError.message : String(parseError),
        );
      }
      request = consumerRunRequest(consumerOptions, { body, message });
      const result = await idempotency.run(request, async (context) => {
        seen.context = context;
        try {
          return await handler(body, context, message);
        } catch (handlerError) {
          seen.failure = { error: handlerError };
          throw handlerError;
        }
      });
      disposition = messageDisposition({ ok: true, status: result.status });
    } catch (thrown) {
      error = thrown;
      const handlerFailed = request !== undefined && seen.failure !== undefined && seen.failure.error === thrown;
      disposition = messageDisposition({
        ok: false,
        error: thrown,
        handlerOutcome: handlerFailed ? idempotency.failureOutcome(request!, thrown, seen.context) : undefined,
      });
    }
    // Never rejects: a settlement that cannot be carried out falls back to a requeue.
    await settler.settle(options.channel, message, disposition, { consumer: options.consumer, error });
  };
}
