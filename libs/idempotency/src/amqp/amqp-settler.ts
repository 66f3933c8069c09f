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
import { requeueAfterFailure } from './amqp-settle-fallback.js';
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
 * Options of an `AmqpSettler`: the `AmqpRedeliveryOptions` of the queue it settles for. `queue` is
 * required: a message that came through an exchange does not say which queue it was read from.
 *
 * @publicApi
 */
export type AmqpSettlerOptions = AmqpRedeliveryOptions;

/** What the settler is told about the message besides its disposition. */
export interface AmqpSettleInput {
  consumer: string;
  error?: unknown;
}

/** Whether `channel` has publisher confirms (`connection.createConfirmChannel()`). @internal */
export function isConfirmChannel(channel: Channel): channel is ConfirmChannel {
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
 * `settle()` never rejects and never leaves a message unacknowledged on a live channel: when the
 * republish is refused (a queue at its `x-max-length` with `x-overflow: reject-publish`) or the
 * channel fails, the message is nacked with requeue after `retryDelayMs` (the channel being
 * closed, the broker requeues it itself), logged and counted
 * (`idempotency.consumer.settlement_fallbacks`). Use a confirm channel: on a plain one a refused
 * republish cannot be seen, and the message is lost.
 *
 * @publicApi
 */
export class AmqpSettler {
  private readonly options: ResolvedAmqpRedelivery;
  private readonly declared = new WeakMap<Channel, Promise<void>>();
  private readonly unconfirmedChannels = new WeakSet<Channel>();
  private readonly logger = new Logger('IdempotentAmqp');

  constructor(settings: AmqpSettlerOptions) {
    this.options = resolveAmqpRedelivery(settings);
  }

  /** The queue this settler settles for. */
  get queue(): string {
    return this.options.queue;
  }

  async settle(
    channel: Channel,
    message: ConsumeMessage,
    disposition: MessageDisposition,
    input: AmqpSettleInput,
  ): Promise<void> {
    try {
      await this.carryOut(channel, message, disposition, input);
    } catch (error) {
      await requeueAfterFailure(channel, message, {
        consumer: input.consumer,
        action: disposition.action,
        error,
        delayMs: this.options.retryDelayMs,
      });
    }
  }

  private async carryOut(
    channel: Channel,
    message: ConsumeMessage,
    disposition: MessageDisposition,
    input: AmqpSettleInput,
  ): Promise<void> {
    const { options } = this;
    switch (disposition.action) {
      case 'ack':
        channel.ack(message);
        return;
      case 'dead-letter':
        return this.deadLetter(channel, message, disposition.reason, input);
      case 'retry': {
        const plan = retryPlan(
          disposition,
          failedAttemptsOf(message.properties.headers, AMQP_ATTEMPTS_HEADER),
          options,
        );
        if (plan.kind === 'give-up') {
          return this.deadLetter(channel, message, 'attempts-exhausted', input, {
            [AMQP_ATTEMPTS_HEADER]: plan.attempts,
          });
        }
        await this.republish(channel, message, options.retryQueue, {
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

  private async deadLetter(
    channel: Channel,
    message: ConsumeMessage,
    reason: DeadLetterReason,
    input: AmqpSettleInput,
    extra: Record<string, unknown> = {},
  ): Promise<void> {
    const { options } = this;
    await this.republish(channel, message, options.deadLetterQueue, {
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
    channel: Channel,
    message: ConsumeMessage,
    queue: string,
    extra: { headers: Record<string, unknown>; expiration?: string },
  ): Promise<void> {
    if (this.options.assertTopology) await this.declareOnce(channel);
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
      this.warnUnconfirmed(channel);
      channel.sendToQueue(queue, message.content, publish);
      return;
    }
    await new Promise<void>((resolve, reject) =>
      channel.sendToQueue(queue, message.content, publish, (error: unknown) => (error ? reject(error) : resolve())),
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

  private warnUnconfirmed(channel: Channel): void {
    if (this.unconfirmedChannels.has(channel)) return;
    this.unconfirmedChannels.add(channel);
    this.logger.warn(
      `"${this.options.queue}": settling on a channel without publisher confirms: a republish the broker refuses is lost unseen; consume on connection.createConfirmChannel()`,
    );
  }
}
