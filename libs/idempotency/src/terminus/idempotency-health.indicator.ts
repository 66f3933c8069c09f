import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';
import { IdempotencyStore } from '../stores/idempotency-store.js';

/**
 * Options of {@link IdempotencyHealthIndicator.isHealthy}.
 *
 * @publicApi
 */
export interface IdempotencyHealthOptions {
  /**
   * How long each tier may take to answer its ping before it counts as down, in ms.
   * @default 1000
   */
  timeoutMs?: number;
  /**
   * Adds each tier's round trip (`latencyMs`) and, for a tier that is down, the store's error
   * message (`error`) to the result. Store errors name hosts, ports and driver internals: ask for
   * them only where the caller is trusted (an operator's endpoint behind authentication), never
   * on a public `/health`. Without them each tier reports its status alone; a tier that is down is
   * logged with its error either way.
   * @default false
   */
  details?: boolean;
}

/**
 * One tier in the indicator's result: `up`, `down`, or `not-configured` (no durable store); with
 * `details: true`, also the ping's round trip and, when down, why.
 *
 * @publicApi
 */
export type IdempotencyTierHealth =
  | { status: 'up'; latencyMs?: number }
  | { status: 'down'; latencyMs?: number; error?: string }
  | { status: 'not-configured' };

const DEFAULT_TIMEOUT_MS = 1_000;

/**
 * A Terminus health indicator for the idempotency stores: pings the fast tier and the durable
 * tier (when there is one) at once, and is `down` when either does not answer in time, since
 * requests then fail closed (503). Lives behind `nestjs-idempotency/terminus`, the only part of
 * the library that imports `@nestjs/terminus`.
 *
 * The result says only `up` or `down` per tier, so an anonymous `/health` leaks no host names or
 * driver errors; why a tier is down goes to the log (`IdempotencyHealthIndicator`, warn), and to
 * the result only with `details: true`.
 *
 * Provide it in a module that imports `TerminusModule` (it needs Terminus'
 * `HealthIndicatorService`) and sees `IdempotencyModule` (global by default).
 *
 * @example
 * @Module({ imports: [TerminusModule], controllers: [HealthController], providers: [IdempotencyHealthIndicator] })
 * // in HealthController:
 * @Get() @HealthCheck()
 * check() { return this.health.check([() => this.idempotency.isHealthy('idempotency')]); }
 * // → { "idempotency": { "status": "up", "fast": { "status": "up" }, "durable": { "status": "up" } } }
 * // an operator's endpoint: isHealthy('idempotency', { details: true })
 * // → { "idempotency": { "status": "down", "fast": { "status": "down", "latencyMs": 1000.4, "error": "..." }, ... } }
 * @publicApi
 */
@Injectable()
export class IdempotencyHealthIndicator {
  private readonly logger = new Logger(IdempotencyHealthIndicator.name);

  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly store: IdempotencyStore,
    @Optional() @Inject(DurableIdempotencyStore) private readonly durableStore?: DurableIdempotencyStore | null,
  ) {}

  /** `up` when every configured tier answers a ping within `timeoutMs`; `down` otherwise. */
  async isHealthy<const Key extends string>(
    key: Key,
    options: IdempotencyHealthOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs must be a positive integer number of milliseconds, got ${timeoutMs}`);
    }
    const [fastPing, durablePing] = await Promise.all([
      pingTier(this.store, timeoutMs),
      this.durableStore ? pingTier(this.durableStore, timeoutMs) : ({ status: 'not-configured' } as const),
    ]);
    this.logDown('fast', fastPing);
    this.logDown('durable', durablePing);
    const fast = options.details === true ? fastPing : statusOf(fastPing);
    const durable = options.details === true ? durablePing : statusOf(durablePing);
    const session = this.indicators.check(key);
    return fast.status === 'down' || durable.status === 'down'
      ? session.down({ fast, durable })
      : session.up({ fast, durable });
  }

  private logDown(tier: 'fast' | 'durable', health: IdempotencyTierHealth): void {
    if (health.status !== 'down') return;
    this.logger.warn(`idempotency ${tier} tier down (its ping failed after ${health.latencyMs} ms): ${health.error}`);
  }
}

/** A tier's health without its latency or error: what anyone may see. */
function statusOf(health: IdempotencyTierHealth): IdempotencyTierHealth {
  return { status: health.status } as IdempotencyTierHealth;
}

async function pingTier(store: Pick<IdempotencyStore, 'ping'>, timeoutMs: number): Promise<IdempotencyTierHealth> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
  });
  try {
    await Promise.race([store.ping(), timedOut]);
    return { status: 'up', latencyMs: elapsedSince(started) };
  } catch (error) {
    return {
      status: 'down',
      latencyMs: elapsedSince(started),
      error: error instanceof Error ? error.message : String(error),
    };
  } finally {
    clearTimeout(timer);
  }
}

function elapsedSince(started: number): number {
  return Math.round((performance.now() - started) * 10) / 10;
}
