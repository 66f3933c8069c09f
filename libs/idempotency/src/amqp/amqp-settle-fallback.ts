import type { Channel, ConsumeMessage } from 'amqplib';
import type { MessageDisposition } from '../consumers/message-disposition.js';
import { reportSettlementFallback } from '../telemetry/settlement-fallbacks.js';

/**
 * The safe disposition of a message that could not be settled as decided (the republish was
 * refused, the channel failed, the queue is unknown): after `delayMs` (so that a lasting
 * failure does not turn into a hot loop), `nack` with requeue, and RabbitMQ delivers it again;
 * nothing is lost and nothing stays unacknowledged on a live channel. When the channel is
 * already closed, the broker has requeued the message itself. Either way it is logged and
 * counted (`idempotency.consumer.settlement_fallbacks`).
 *
 * @internal
 */
export async function requeueAfterFailure(
  channel: Channel,
  message: ConsumeMessage,
  failed: { consumer: string; action: MessageDisposition['action']; error: unknown; delayMs: number },
): Promise<void> {
  if (failed.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, failed.delayMs));
  let outcome: 'requeued' | 'channel_closed' = 'requeued';
  try {
    channel.nack(message, false, true);
  } catch {
    // amqplib throws on a closed channel: RabbitMQ requeued every unacknowledged message of it.
    outcome = 'channel_closed';
  }
  reportSettlementFallback({ consumer: failed.consumer, action: failed.action, outcome, error: failed.error });
}
