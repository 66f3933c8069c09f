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
import { resolveAmqpRedelivery, type AmqpRedeliveryOptions, type ResolvedAmqpRedelivery } from './amqp-redelivery.options.js';
import { failedAttemptsOf, retryPlan } from './amqp-retry-delay.js';
import { assertAmqpRedeliveryTopology } from './amqp-topology.js';

/** Headers RabbitMQ writes when it dead-letters: dropped on republishing, the broker writes them anew. */
const BROKER_DEATH_HEADERS = ['x-death', 'x-first-death-reason', 'x-first-death-queue', 'x-first-death-exchange', 'x-last-death-reason', 'x-last-death-queue', 'x-last-death-exchange'];
const MAX_ERROR_HEADER_LENGTH = 500;

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
  private readonly options: ResolvedAmqpRedelivery;
  private readonly declared = new WeakMap<Channel, Promise<void>>();
  private readonly logger = new Logger('IdempotentAmqp');

  constructor(options: AmqpRedeliveryOptions) {
    this.options = resolveAmqpRedelivery(options);
  }

  async settle(channel: Channel, message: ConsumeMessage, disposition: MessageDisposition, input: AmqpSettleInput): Promise<void> {
    switch (disposition.action) {
      case 'ack':
        channel.ack(message);
        return;
      case 'dead-letter':
        return this.deadLetter(channel, message, disposition.reason, input);
      case 'retry': {
        const plan = retryPlan(disposition, failedAttemptsOf(message.properties.headers, AMQP_ATTEMPTS_HEADER), this.options);
        if (plan.kind === 'give-up') {
          return this.deadLetter(channel, message, 'attempts-exhausted', input, { [AMQP_ATTEMPTS_HEADER]: plan.attempts });
        }
        await this.republish(channel, message, this.options.retryQueue, {
          expiration: String(plan.delayMs),
          headers: { [AMQP_ATTEMPTS_HEADER]: plan.attempts, [AMQP_RETRY_REASON_HEADER]: disposition.reason, [AMQP_CONSUMER_HEADER]: input.consumer },
        });
        channel.ack(message);
        if (disposition.reason === 'transient-failure') {
          this.logger.warn(
            `${input.consumer}: delivery failed (${describeError(input.error)}); retry ${plan.attempts} of ${this.options.maxAttempts - 1} in ${plan.delayMs} ms`,
          );
        }
        return;
      }
    }
  }

  private async deadLetter(
    channel: Channel,
    message: ConsumeMessage,
    reason: DeadLetterReason,
    input: AmqpSettleInput,
    extra: Record<string, unknown> = {},
  ): Promise<void> {
    await this.republish(channel, message, this.options.deadLetterQueue, {
      headers: {
        ...extra,
        [AMQP_DEAD_LETTER_REASON_HEADER]: reason,
        [AMQP_CONSUMER_HEADER]: input.consumer,
        [AMQP_ORIGINAL_QUEUE_HEADER]: this.options.queue,
        ...(input.error !== undefined && { [AMQP_DEAD_LETTER_ERROR_HEADER]: describeError(input.error) }),
      },
    });
    channel.ack(message);
    this.logger.warn(`${input.consumer}: message dead-lettered to "${this.options.deadLetterQueue}" (${reason})`);
  }

  private async republish(
    channel: Channel,
    message: ConsumeMessage,
    queue: string,
    extra: { headers: Record<string, unknown>; expiration?: string },
  ): Promise<void> {
    if (this.options.assertTopology) await this.declareOnce(channel);
    const { properties } = message;
    const headers: Record<string, unknown> = { ...properties.headers };
    for (const name of BROKER_DEATH_HEADERS) delete headers[name];
    const options: Options.Publish = {
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
      channel.sendToQueue(queue, message.content, options);
      return;
    }
    await new Promise<void>((resolve, reject) =>
      channel.sendToQueue(queue, message.content, options, (error: unknown) => (error ? reject(error) : resolve())),
    );
  }

  private declareOnce(channel: Channel): Promise<void> {
    let declared = this.declared.get(channel);
    if (!declared) {
      declared = assertAmqpRedeliveryTopology(channel, this.options);
      declared.catch(() => this.declared.delete(channel));
      this.declared.set(channel, declared);
    }
    return declared;
  }
}
