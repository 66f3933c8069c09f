import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { IsNull } from 'typeorm';
import { Clock } from '../common/clock.js';
import { ORDERS_CONFIG, type OrdersConfig } from '../config/orders.config.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import { OrderCreatedProcessor } from '../notifications/order-created.processor.js';
import { ORDER_CREATED_JOB, toOrderCreatedEvent } from './order-created.event.js';
import { OrderEventsQueue } from './order-events.queue.js';
import { OutboxEvent } from './outbox-event.entity.js';

const BATCH = 100;

/**
 * Hands committed outbox events on: to the `order-events` queue with Redis, or straight to
 * `OrderCreatedProcessor` in this process without it. It runs when kicked (right after a
 * transaction that wrote an event has committed), at startup, and every `OUTBOX_POLL_MS`, so an
 * event whose process died between its commit and its dispatch is dispatched by the next scan of
 * any instance. Dispatch is at least once (two instances may hand on one event); the job id and
 * the processor's idempotency by event id make it take effect once.
 */
@Injectable()
export class OutboxRelay implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('OutboxRelay');
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;

  constructor(
    @Inject(ORDERS_CONFIG) private readonly config: OrdersConfig,
    private readonly db: TransactionRunner,
    private readonly clock: Clock,
    private readonly queue: OrderEventsQueue,
    private readonly processor: OrderCreatedProcessor,
  ) {}

  onApplicationBootstrap(): void {
    this.kick();
    this.timer = setInterval(() => this.kick(), this.config.outboxPollMs);
    this.timer.unref();
  }

  /** Dispatches the pending events soon. Calls during a round coalesce into one more round. */
  kick(): void {
    if (this.stopped) {
      return;
    }
    if (this.running) {
      this.again = true;
      return;
    }
    // Kicked from a request: the round is background work, not part of that request's trace.
    this.running = context.with(ROOT_CONTEXT, () => this.drain()).finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** Resolves once no round is running (rounds kicked meanwhile included). */
  async idle(): Promise<void> {
    while (this.running) {
      await this.running;
    }
  }

  async onModuleDestroy(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.idle();
  }

  private async drain(): Promise<void> {
    try {
      for (;;) {
        const pending = await this.db.read((manager) =>
          manager.find(OutboxEvent, { where: { dispatchedAtMs: IsNull() }, order: { createdAtMs: 'ASC', id: 'ASC' }, take: BATCH }),
        );
        for (const event of pending) {
          if (this.stopped || !(await this.dispatch(event))) {
            return;
          }
        }
        if (pending.length < BATCH) {
          return;
        }
      }
    } catch (error) {
      this.logger.warn(`outbox scan failed: ${(error as Error).message}; retried in ${this.config.outboxPollMs} ms`);
    }
  }

  /** Hands one event on and marks it dispatched; false (stop this round) when that failed. */
  private async dispatch(event: OutboxEvent): Promise<boolean> {
    const data = toOrderCreatedEvent(event);
    try {
      if (this.queue.enabled) {
        await this.queue.enqueue(data);
      } else {
        await this.processor.process({ id: event.id, name: ORDER_CREATED_JOB, data });
      }
    } catch (error) {
      const unrecoverable = (error as Error).name === 'UnrecoverableError';
      this.logger.warn(`${event.type} ${event.id} not dispatched: ${(error as Error).message}${unrecoverable ? ' (given up)' : '; retried later'}`);
      if (!unrecoverable) {
        return false;
      }
    }
    await this.db.transaction((manager) =>
      manager.update(OutboxEvent, { id: event.id, dispatchedAtMs: IsNull() }, { dispatchedAtMs: this.clock.nowMs() }),
    );
    return true;
  }
}
