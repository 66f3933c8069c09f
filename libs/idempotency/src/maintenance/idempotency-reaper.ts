import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
  Optional,
} from '@nestjs/common';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../idempotency.module-definition.js';
import type { IdempotencyModuleOptions } from '../interfaces/idempotency-module-options.interface.js';
import { DurableIdempotencyStore } from '../stores/durable-idempotency-store.js';

const DEFAULT_INTERVAL_MS = 60_000;
const DEFAULT_BATCH_SIZE = 500;
/** A sweep stops after this many batches, so one instance never monopolises the table. */
const MAX_BATCHES_PER_SWEEP = 100;

/**
 * Deletes expired durable records in batches (DESIGN "Operations"). Expiry is enforced on read
 * anyway (docs/contract.md B.10 rule 30): the reaper only reclaims space. Safe on many instances: the
 * store's `deleteExpired` skips rows another instance is deleting. Enabled by the module's
 * `reaper` option; `sweep()` can also be called from your own scheduler.
 */
@Injectable()
export class IdempotencyReaper implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('IdempotencyReaper');
  private timer?: NodeJS.Timeout;
  private running?: Promise<number>;

  constructor(
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) private readonly options: IdempotencyModuleOptions,
    @Optional() @Inject(DurableIdempotencyStore) private readonly durableStore?: DurableIdempotencyStore | null,
  ) {}

  onApplicationBootstrap(): void {
    const reaper = this.options.reaper;
    if (!reaper || !this.durableStore) return;
    const intervalMs = reaper.intervalMs ?? DEFAULT_INTERVAL_MS;
    this.timer = setInterval(() => void this.sweep().catch(() => undefined), intervalMs);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }

  /**
   * Deletes expired records until a batch comes back short; returns how many it deleted. Without
   * `nowMs`, expiry is judged by the durable store's (the database's) clock, not this host's.
   */
  sweep(nowMs?: number): Promise<number> {
    this.running ??= this.sweepBatches(nowMs).finally(() => (this.running = undefined));
    return this.running;
  }

  private async sweepBatches(nowMs: number | undefined): Promise<number> {
    const store = this.durableStore;
    if (!store) return 0;
    const batchSize = (this.options.reaper || undefined)?.batchSize ?? DEFAULT_BATCH_SIZE;
    let total = 0;
    try {
      for (let batch = 0; batch < MAX_BATCHES_PER_SWEEP; batch++) {
        const deleted = await store.deleteExpired(batchSize, nowMs);
        total += deleted;
        if (deleted < batchSize) break;
      }
    } catch (error) {
      this.logger.warn(`sweep stopped after ${total} deletions: ${(error as Error).message}`);
      throw error;
    }
    if (total > 0) this.logger.log(`deleted ${total} expired idempotency records`);
    return total;
  }
}
