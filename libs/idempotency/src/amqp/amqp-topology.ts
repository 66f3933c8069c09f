import type { Channel, Options } from 'amqplib';
import { resolveAmqpRedelivery, type AmqpRedeliveryOptions } from './amqp-redelivery.options.js';

/**
 * The `arguments` of the consumed queue itself: whatever the broker or the framework rejects
 * without requeueing (Nest's RMQ server rejects a message no handler matches, e.g. one whose
 * body is not JSON) goes to the dead-letter queue, where RabbitMQ's `x-first-death-reason`
 * says `rejected`. Pass them wherever the queue is declared (Nest: `queueOptions.arguments`, on
 * the server and on every client), or the declarations conflict.
 *
 * @example queueOptions: { durable: true, arguments: amqpQueueArguments({ queue: 'orders' }) }
 * @publicApi
 */
export function amqpQueueArguments(options: AmqpRedeliveryOptions): Record<string, string> {
  const { deadLetterQueue } = resolveAmqpRedelivery(options);
  return { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': deadLetterQueue };
}

/** The declaration of the retry queue: no consumer; an expired message goes back to `queue`. @publicApi */
export function amqpRetryQueueOptions(options: AmqpRedeliveryOptions): Options.AssertQueue {
  const { queue } = resolveAmqpRedelivery(options);
  return { durable: true, arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': queue } };
}

/**
 * Declares the retry queue and the dead-letter queue of `options.queue` (both durable). Safe to
 * call again with the same options; RabbitMQ closes the channel when an existing queue was
 * declared with other arguments.
 *
 * @publicApi
 */
export async function assertAmqpRedeliveryTopology(channel: Channel, options: AmqpRedeliveryOptions): Promise<void> {
  const resolved = resolveAmqpRedelivery(options);
  await channel.assertQueue(resolved.retryQueue, amqpRetryQueueOptions(options));
  await channel.assertQueue(resolved.deadLetterQueue, { durable: true });
}
