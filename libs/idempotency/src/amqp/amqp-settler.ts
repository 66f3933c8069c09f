import { Logger } from '@nestjs/common';
import type { Channel, ConfirmChannel, ConsumeMessage, Options } from 'amqplib';
import type { DeadLetterReason, MessageDisposition } from '../consumers/message-disposition.js';
import {
  AMQP_ATTEMPTS_HEADER,
  AMQP_CONSUMER_HEADER,
  AMQP_DEAD_LETTER_ERROR_HEADER,
  AMQP_DEAD_LETTER_REASON_HEADER,
  AMQP_ORIGINAL_QUEUE_HEADER,
  AMQP_RETRY_REASON_HEADER,
} from './amqp.constants.js';
import {
  resolveAmqpRedelivery,
  type AmqpRedeliveryOptions,
  type ResolvedAmqpRedelivery,
} from './amqp-redelivery.options.js';
import { failedAttemptsOf, retryPlan } from './amqp-retry-delay.js';
import { assertAmqpRedeliveryTopology } from './amqp-topology.js';

/** Headers RabbitMQ writes when it dead-letters: dropped on republishing, the broker writes them anew. */
const BROKER_DEATH_HEADERS = [
  'x-death',
  'x-first-death-reason',
  'x-first-death-queue',
  'x-first-death-exchange',
  'x-last-death-reason',
  'x-last-death-queue',
  'x-last-death-exchange',
];
const MAX_ERROR_HEADER_LENGTH = 500;

/**
 * Options of an `AmqpSettler`: `AmqpRedeliveryOptions`, where `queue` may be left out to settle
 * each message for the queue it was delivered from (read from the delivery: a message sent
 * straight to a queue, or coming back from the retry queue, has the default exchange and the
 * queue's name as routing key).
 *
 * @publicApi
 */
export type AmqpSettlerOptions = Omit<AmqpRedeliveryOptions, 'queue'> & { queue?: string };

/** The queue a delivery came from, when the delivery says it (the default exchange). */
function deliveryQueue(message: ConsumeMessage): string {
  if (message.fields.exchange === '' && message.fields.routingKey) return message.fields.routingKey;
  throw new Error(
    `cannot tell which queue this message was consumed from (it came through exchange "${message.fields.exchange}"): pass \`queue\` to rmqSettlement()`,
  );
}

/** What the settler is told about the message besides its disposition. */
export interface AmqpSettleInput {
  consumer: string;
  error?: unknown;
}

function isConfirmChannel(channel: Channel): channel is ConfirmChannel {
  return typeof (channel as Partial<ConfirmChannel>).waitForConfirms === 'function';
}

function describeError(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > MAX_ERROR_HEADER_LENGTH ? `${text.slice(0, MAX_ERROR_HEADER_LENGTH - 1)}…` : text;
}

/**
 * Carries out a `MessageDisposition` on an AMQP channel: `ack`, or republish to the retry queue
 * (with a per-message TTL, after which RabbitMQ dead-letters it back to the consumed queue) or
 * to the dead-letter queue, then `ack`. The republished copy is confirmed before the original
 * is acknowledged (on a confirm channel), so a crash in between duplicates the message, which
 * the idempotency record absorbs, and never loses it. Each message is acknowledged exactly once.
 *
 * @publicApi
 */
export class AmqpSettler {
  private readonly byQueue = new Map<string, ResolvedAmqpRedelivery>();
  private readonly declared = new WeakMap<Channel, Map<string, Promise<void>>>();
  private readonly logger = new Logger('IdempotentAmqp');

  constructor(private readonly settings: AmqpSettlerOptions) {
    if (settings.queue !== undefined) this.resolved(settings.queue);
  }

  async settle(
    channel: Channel,
    message: ConsumeMessage,
    disposition: MessageDisposition,
    input: AmqpSettleInput,
  ): Promise<void> {
    if (disposition.action === 'ack') {
      channel.ack(message);
      return;
    }
    const options = this.resolved(this.settings.queue ?? deliveryQueue(message));
    switch (disposition.action) {
      case 'dead-letter':
        return this.deadLetter(options, channel, message, disposition.reason, input);
      case 'retry': {
        const plan = retryPlan(
          disposition,
          failedAttemptsOf(message.properties.headers, AMQP_ATTEMPTS_HEADER),
          options,
        );
        if (plan.kind === 'give-up') {
          return this.deadLetter(options, channel, message, 'attempts-exhausted', input, {
            [AMQP_ATTEMPTS_HEADER]: plan.attempts,
          });
        }
        await this.republish(options, channel, message, options.retryQueue, {
          expiration: String(plan.delayMs),
          headers: {
            [AMQP_ATTEMPTS_HEADER]: plan.attempts,
            [AMQP_RETRY_REASON_HEADER]: disposition.reason,
            [AMQP_CONSUMER_HEADER]: input.consumer,
          },
        });
        channel.ack(message);
        if (disposition.reason === 'transient-failure') {
          this.logger.warn(
            `${input.consumer}: delivery failed (${describeError(input.error)}); retry ${plan.attempts} of ${options.maxAttempts - 1} in ${plan.delayMs} ms`,
          );
        }
        return;
      }
    }
  }

  private resolved(queue: string): ResolvedAmqpRedelivery {
    let options = this.byQueue.get(queue);
    if (!options) {
      options = resolveAmqpRedelivery({ ...this.settings, queue });
      this.byQueue.set(queue, options);
    }
    return options;
  }

  private async deadLetter(
    options: ResolvedAmqpRedelivery,
    channel: Channel,
    message: ConsumeMessage,
    reason: DeadLetterReason,
    input: AmqpSettleInput,
    extra: Record<string, unknown> = {},
  ): Promise<void> {
    await this.republish(options, channel, message, options.deadLetterQueue, {
      headers: {
        ...extra,
        [AMQP_DEAD_LETTER_REASON_HEADER]: reason,
        [AMQP_CONSUMER_HEADER]: input.consumer,
        [AMQP_ORIGINAL_QUEUE_HEADER]: options.queue,
        ...(input.error !== undefined && { [AMQP_DEAD_LETTER_ERROR_HEADER]: describeError(input.error) }),
      },
    });
    channel.ack(message);
    this.logger.warn(`${input.consumer}: message dead-lettered to "${options.deadLetterQueue}" (${reason})`);
  }

  private async republish(
    options: ResolvedAmqpRedelivery,
    channel: Channel,
    message: ConsumeMessage,
    queue: string,
    extra: { headers: Record<string, unknown>; expiration?: string },
  ): Promise<void> {
    if (options.assertTopology) await this.declareOnce(channel, options);
    const { properties } = message;
    const headers: Record<string, unknown> = { ...properties.headers };
    for (const name of BROKER_DEATH_HEADERS) delete headers[name];
    const publish: Options.Publish = {
      contentType: properties.contentType,
      contentEncoding: properties.contentEncoding,
      deliveryMode: properties.deliveryMode,
      priority: properties.priority,
      correlationId: properties.correlationId,
      replyTo: properties.replyTo,
      messageId: properties.messageId,
      timestamp: properties.timestamp,
      type: properties.type,
      appId: properties.appId,
      headers: { ...headers, ...extra.headers },
      expiration: extra.expiration,
    };
    if (!isConfirmChannel(channel)) {
      channel.sendToQueue(queue, message.content, publish);
      return;
    }
    await new Promise<void>((resolve, reject) =>
      channel.sendToQueue(queue, message.content, publish, (error: unknown) => (error ? reject(error) : resolve())),
    );
  }

  private declareOnce(channel: Channel, options: ResolvedAmqpRedelivery): Promise<void> {
    let ofChannel = this.declared.get(channel);
    if (!ofChannel) {
      ofChannel = new Map();
      this.declared.set(channel, ofChannel);
    }
    let declared = ofChannel.get(options.queue);
    if (!declared) {
      declared = assertAmqpRedeliveryTopology(channel, options);
      declared.catch(() => ofChannel.delete(options.queue));
      ofChannel.set(options.queue, declared);
    }
    return declared;
  }
}
