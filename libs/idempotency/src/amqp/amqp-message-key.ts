import type { ConsumeMessage } from 'amqplib';
import { IDEMPOTENCY_KEY_MESSAGE_HEADER } from '../consumers/message-key-header.js';

/** A header of an AMQP message as a string (AMQP long strings may arrive as bytes), or undefined. */
export function amqpHeader(message: Pick<ConsumeMessage, 'properties'>, name: string): string | undefined {
  const value: unknown = message.properties.headers?.[name];
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return undefined;
}

/**
 * The idempotency key of an AMQP message: the `idempotency-key` header (`header` to read
 * another one), else the `messageId` property. Never the delivery tag: it changes with every
 * redelivery.
 *
 * @publicApi
 */
export function amqpMessageKey(
  message: Pick<ConsumeMessage, 'properties'>,
  header: string = IDEMPOTENCY_KEY_MESSAGE_HEADER,
): string | undefined {
  return amqpHeader(message, header) ?? (message.properties.messageId || undefined);
}
