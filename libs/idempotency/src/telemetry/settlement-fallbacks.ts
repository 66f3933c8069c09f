import { Logger } from '@nestjs/common';
import { metrics, type Counter, type MeterProvider } from '@opentelemetry/api';
import {
  IDEMPOTENCY_INSTRUMENTATION_SCOPE,
  IDEMPOTENCY_METRICS,
  INSTRUMENTATION_VERSION,
} from './idempotency-telemetry.constants.js';
import { formatLogLine } from './log-line.js';

/** What became of a message whose settlement failed (`IDEMPOTENCY_METRICS.settlementFallbacks`). */
export type SettlementFallbackOutcome = 'requeued' | 'channel_closed' | 'unsettled';

/** One settlement that fell back: who, what was decided, what was done instead, and why. */
export interface SettlementFallback {
  consumer: string;
  action: 'ack' | 'retry' | 'dead-letter';
  outcome: SettlementFallbackOutcome;
  error: unknown;
}

const logger = new Logger('IdempotentConsumer');
let current: { provider: MeterProvider; counter: Counter } | undefined;

const OUTCOME_TEXT: Record<SettlementFallbackOutcome, string> = {
  requeued: 'message nacked back to its queue (requeue)',
  channel_closed: 'the channel is closed: the broker requeues the message',
  unsettled: 'the settlement rejected: the message is left to the transport',
};

/**
 * Counts a settlement fallback and logs it as one error line. Adapters call it wherever a
 * message could not be settled as decided, so operators see each one (the counter is on the
 * global meter provider, looked up again when the application registers an SDK).
 *
 * @internal
 */
export function reportSettlementFallback(fallback: SettlementFallback): void {
  const provider = metrics.getMeterProvider();
  if (current?.provider !== provider) {
    const counter = provider
      .getMeter(IDEMPOTENCY_INSTRUMENTATION_SCOPE, INSTRUMENTATION_VERSION)
      .createCounter(IDEMPOTENCY_METRICS.settlementFallbacks, {
        description: 'Messages not settled as decided, given a safe disposition instead',
        unit: '{message}',
      });
    current = { provider, counter };
  }
  current.counter.add(1, { consumer: fallback.consumer, action: fallback.action, outcome: fallback.outcome });
  const error = fallback.error instanceof Error ? fallback.error.message : String(fallback.error);
  logger.error(
    formatLogLine(`could not settle a message (${fallback.action}); ${OUTCOME_TEXT[fallback.outcome]}`, {
      event: 'settlement_fallback',
      consumer: fallback.consumer,
      action: fallback.action,
      outcome: fallback.outcome,
      error,
    }),
  );
}
