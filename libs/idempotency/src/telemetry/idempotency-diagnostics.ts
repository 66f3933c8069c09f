/**
 * `node:diagnostics_channel` events for the moments that matter to an APM or a test: a claim, a
 * replay, a conflict, a takeover, a completion, a release and a lost lease. They need no
 * OpenTelemetry SDK, and cost one property read per event while nobody subscribes.
 */
import { channel } from 'node:diagnostics_channel';

/**
 * The channel names, a public contract like the metric names.
 *
 * @example
 * import { subscribe } from 'node:diagnostics_channel';
 * import { IDEMPOTENCY_DIAGNOSTICS_CHANNELS } from 'nestjs-idempotency/telemetry';
 * subscribe(IDEMPOTENCY_DIAGNOSTICS_CHANNELS.takeover, (event) => console.warn('takeover', event));
 * @publicApi
 */
export const IDEMPOTENCY_DIAGNOSTICS_CHANNELS = {
  claim: 'nestjs-idempotency:claim',
  replay: 'nestjs-idempotency:replay',
  conflict: 'nestjs-idempotency:conflict',
  takeover: 'nestjs-idempotency:takeover',
  complete: 'nestjs-idempotency:complete',
  release: 'nestjs-idempotency:release',
  leaseLost: 'nestjs-idempotency:lease-lost',
} as const;

/**
 * What every event carries: the record's storage id (a hash, never the raw key), the operation,
 * the tenant when the scope has one, and the tier that decided (`durable` on durable routes).
 *
 * @publicApi
 */
export interface IdempotencyDiagnosticsEvent {
  keyHash: string;
  operation: string;
  tenant?: string;
  tier: 'fast' | 'durable';
}

/**
 * The payload of each channel, by its key in `IDEMPOTENCY_DIAGNOSTICS_CHANNELS`.
 *
 * @publicApi
 */
export interface IdempotencyDiagnosticsEvents {
  /** The handler may run: a fresh claim, or a dead lease taken over. */
  claim: IdempotencyDiagnosticsEvent & { tookOver: boolean; fencingToken: number };
  /** Answered from a stored record; `replayable: false` is the 409 replay-unavailable. */
  replay: IdempotencyDiagnosticsEvent & { statusCode: number; replayable: boolean };
  /** Refused: the key was reused with another payload, or the original still runs. */
  conflict: IdempotencyDiagnosticsEvent & { kind: 'mismatch' | 'in_progress' };
  /** A dead lease was found: taken over, or stored as outcome unknown (`staleLock: 'fail'`). */
  takeover: IdempotencyDiagnosticsEvent & { outcome: 'taken_over' | 'outcome_unknown' };
  /** The claim's outcome was stored. */
  complete: IdempotencyDiagnosticsEvent & { fencingToken: number };
  /** The claim ended by freeing the key (a 5xx, a released outcome, a failed handler). */
  release: IdempotencyDiagnosticsEvent & { fencingToken: number };
  /** The claim was fenced out by a newer one (`phase`: where it found out); its result is not stored. */
  leaseLost: IdempotencyDiagnosticsEvent & { fencingToken: number; phase: string };
}

type ChannelName = keyof typeof IDEMPOTENCY_DIAGNOSTICS_CHANNELS;

const channels = Object.fromEntries(
  Object.entries(IDEMPOTENCY_DIAGNOSTICS_CHANNELS).map(([name, id]) => [name, channel(id)]),
) as Record<ChannelName, ReturnType<typeof channel>>;

/** Publishes `event()` on `name`'s channel; the event is built only when someone listens. */
export function publishDiagnostics<N extends ChannelName>(name: N, event: () => IdempotencyDiagnosticsEvents[N]): void {
  const target = channels[name];
  if (target.hasSubscribers) target.publish(event());
}
