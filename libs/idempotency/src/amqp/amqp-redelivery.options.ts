import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';

/**
 * How the AMQP adapter redelivers and dead-letters the messages of one queue. Retries go through
 * a retry queue without consumers: the message waits there for its delay (a per-message TTL),
 * then RabbitMQ dead-letters it back to `queue`. Poison messages go to the dead-letter queue.
 *
 * @publicApi
 */
export interface AmqpRedeliveryOptions {
  /** The queue the consumer reads; retried messages come back to it. */
  queue: string;
  /** Where messages wait before a retry. @default `${queue}.retry` */
  retryQueue?: string;
  /** Where poison messages go. @default `${queue}.dead-letter` */
  deadLetterQueue?: string;
  /** Delay before the first retry of a transient failure, in ms; it doubles with each attempt. @default 1_000 */
  retryDelayMs?: number;
  /** Longest delay before any retry, in ms. @default 60_000 */
  maxRetryDelayMs?: number;
  /** Deliveries that may fail transiently before the message is dead-lettered (`attempts-exhausted`). @default 10 */
  maxAttempts?: number;
  /**
   * An in-progress duplicate waits for the original's remaining lease times this factor (at
   * least `retryDelayMs`, at most `maxRetryDelayMs`). @default 1
   */
  inProgressDelayFactor?: number;
  /**
   * Declares the retry and dead-letter queues (durable) on each channel before its first
   * retry or dead letter. Set it to false when you declare them yourself
   * (`assertAmqpRedeliveryTopology`). @default true
   */
  assertTopology?: boolean;
}

/** The options with their defaults. @internal */
export interface ResolvedAmqpRedelivery {
  queue: string;
  retryQueue: string;
  deadLetterQueue: string;
  retryDelayMs: number;
  maxRetryDelayMs: number;
  maxAttempts: number;
  inProgressDelayFactor: number;
  assertTopology: boolean;
}

/** @internal */
export function resolveAmqpRedelivery(options: AmqpRedeliveryOptions): ResolvedAmqpRedelivery {
  if (typeof options.queue !== 'string' || options.queue.length === 0) {
    throw new IdempotencyConfigurationError(
      `queue must name the queue the consumer reads (the queue given to channel.consume(), or the \`queue\` of the Transport.RMQ options), got ${String(options.queue)}.`,
    );
  }
  const resolved: ResolvedAmqpRedelivery = {
    queue: options.queue,
    retryQueue: options.retryQueue ?? `${options.queue}.retry`,
    deadLetterQueue: options.deadLetterQueue ?? `${options.queue}.dead-letter`,
    retryDelayMs: options.retryDelayMs ?? 1_000,
    maxRetryDelayMs: options.maxRetryDelayMs ?? 60_000,
    maxAttempts: options.maxAttempts ?? 10,
    inProgressDelayFactor: options.inProgressDelayFactor ?? 1,
    assertTopology: options.assertTopology ?? true,
  };
  for (const name of ['retryDelayMs', 'maxRetryDelayMs', 'maxAttempts', 'inProgressDelayFactor'] as const) {
    if (!(Number.isFinite(resolved[name]) && resolved[name] > 0)) {
      throw new TypeError(`AmqpRedeliveryOptions.${name} must be a positive number (got ${String(options[name])})`);
    }
  }
  if (resolved.retryQueue === resolved.queue || resolved.deadLetterQueue === resolved.queue) {
    throw new TypeError('The retry and dead-letter queues must differ from the consumed queue');
  }
  return resolved;
}
