import { Inject, Injectable, Optional } from '@nestjs/common';
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
}

/**
 * One tier in the indicator's details: `up` with the ping's round trip, `down` with why, or
 * `not-configured` (no durable store).
 *
 * @publicApi
 */
export type IdempotencyTierHealth =
  | { status: 'up'; latencyMs: number }
  | { status: 'down'; latencyMs: number; error: string }
  | { status: 'not-configured' };

const DEFAULT_TIMEOUT_MS = 1_000;

/**
 * A Terminus health indicator for the idempotency stores: pings the fast tier and the durable
 * tier (when there is one) at once, and is `down` when either does not answer in time, since
 * requests then fail closed (503). Lives behind `@app/idempotency/terminus`, the only part of
 * the library that imports `@nestjs/terminus`.
 *
 * Provide it in a module that imports `TerminusModule` (it needs Terminus'
 * `HealthIndicatorService`) and sees `IdempotencyModule` (global by default).
 *
 * @example
 * @Module({ imports: [TerminusModule], controllers: [HealthController], providers: [IdempotencyHealthIndicator] })
 * // in HealthController:
 * @Get() @HealthCheck()
 * check() { return this.health.check([() => this.idempotency.isHealthy('idempotency')]); }
 * // → { "idempotency": { "status": "up", "fast": { "status": "up", "latencyMs": 1 }, "durable": { ... } } }
 * @publicApi
 */
@Injectable()
export class IdempotencyHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly store: IdempotencyStore,
    @Optional() @Inject(DurableIdempotencyStore) private readonly durableStore?: DurableIdempotencyStore | null,
  ) {}

  /** `up` when every configured tier answers a ping within `timeoutMs`; `down` otherwise. */
  async isHealthy<const Key extends string>(key: Key, options: IdempotencyHealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs must be a positive integer number of milliseconds, got ${timeoutMs}`);
    }
    const [fast, durable] = await Promise.all([
      pingTier(this.store, timeoutMs),
      this.durableStore ? pingTier(this.durableStore, timeoutMs) : ({ status: 'not-configured' } as const),
    ]);
    const session = this.indicators.check(key);
    return fast.status === 'down' || durable.status === 'down' ? session.down({ fast, durable }) : session.up({ fast, durable });
  }
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
    return { status: 'down', latencyMs: elapsedSince(started), error: error instanceof Error ? error.message : String(error) };
  } finally {
    clearTimeout(timer);
  }
}

function elapsedSince(started: number): number {
  return Math.round((performance.now() - started) * 10) / 10;
}
