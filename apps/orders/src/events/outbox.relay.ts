import { Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { In, IsNull, type EntityManager } from 'typeorm';
import { Clock } from '../common/clock.js';
import { InjectOrdersConfig, type OrdersConfig } from '../config/orders.config.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import { OrderCreatedProcessor } from '../notifications/order-created.processor.js';
import { ORDER_CREATED_JOB, toOrderCreatedEvent } from './order-created.event.js';
import { OrderEventsQueue } from './order-events.queue.js';
import { OrderEventsRabbitPublisher } from './order-events.rabbitmq.js';
import { OutboxEvent } from './outbox-event.entity.js';

const BATCH = 100;
/** Dispatched events deleted per statement by the cleanup. */
const CLEANUP_BATCH = 500;

/**
 * Hands committed outbox events on: to RabbitMQ with `RABBITMQ_URL`, else to the `order-events`
 * BullMQ queue with Redis, else straight to `OrderCreatedProcessor` in this process. It runs
 * when kicked (right after a transaction that wrote an event has committed), at startup, and
 * every `OUTBOX_POLL_MS`, so an event whose process died between its commit and its dispatch is
 * dispatched by the next scan of any instance.
 *
 * On PostgreSQL and MySQL a relay claims its batch with `SELECT ... FOR UPDATE SKIP LOCKED` and marks it
 * dispatched in the same transaction: relays of several instances share the pending events,
 * and one event is handed on by one relay at a time. (Still at least once: a relay that dies
 * after handing an event on and before its commit leaves it pending; the consumers' idempotency
 * makes it take effect once.) sql.js has one connection and one process: no locking there.
 *
 * Dispatched events are deleted once older than `OUTBOX_RETENTION_MS`, `CLEANUP_BATCH` per
 * statement, every `OUTBOX_CLEANUP_INTERVAL_MS`; several instances may clean at once.
 */
@Injectable()
export class OutboxRelay implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('OutboxRelay');
  private timer?: NodeJS.Timeout;
  private cleanupTimer?: NodeJS.Timeout;
  private cleaning?: Promise<number>;
  private running?: Promise<void>;
  private again = false;
  private stopped = false;

  constructor(
    @InjectOrdersConfig('outbox') private readonly outbox: OrdersConfig['outbox'],
    @InjectOrdersConfig('database') private readonly database: OrdersConfig['database'],
    private readonly db: TransactionRunner,
    private readonly clock: Clock,
    private readonly queue: OrderEventsQueue,
    private readonly processor: OrderCreatedProcessor,
    private readonly rabbit: OrderEventsRabbitPublisher,
  ) {}

  onApplicationBootstrap(): void {
    this.kick();
    this.timer = setInterval(() => this.kick(), this.outbox.pollMs);
    this.timer.unref();
    this.cleanupTimer = setInterval(() => void this.cleanUp().catch(() => undefined), this.outbox.cleanupIntervalMs);
    this.cleanupTimer.unref();
  }

  /**
   * Deletes the events dispatched more than `OUTBOX_RETENTION_MS` ago, `CLEANUP_BATCH` per
   * transaction, and resolves with how many. Pending events are never deleted. A call while one
   * runs joins it.
   */
  cleanUp(): Promise<number> {
    this.cleaning ??= this.deleteExpired().finally(() => {
      this.cleaning = undefined;
    });
    return this.cleaning;
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
    this.running = context
      .with(ROOT_CONTEXT, () => this.drain())
      .finally(() => {
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
    clearInterval(this.cleanupTimer);
    await this.idle();
    await this.cleaning?.catch(() => undefined);
  }

  private get locksRows(): boolean {
    return this.database.kind !== 'embedded';
  }

  private async drain(): Promise<void> {
    try {
      for (;;) {
        const more = this.locksRows ? await this.dispatchLockedBatch() : await this.dispatchBatch();
        if (!more || this.stopped) {
          return;
        }
      }
    } catch (error) {
      this.logger.warn(`outbox scan failed: ${(error as Error).message}; retried in ${this.outbox.pollMs} ms`);
    }
  }

  /**
   * PostgreSQL: claims up to `BATCH` pending events that no other relay holds, hands them on,
   * and marks those that went out dispatched, all in one transaction. True when more may wait.
   */
  private dispatchLockedBatch(): Promise<boolean> {
    return this.db.transaction(async (manager) => {
      const pending = await this.pendingQuery(manager)
        .setLock('pessimistic_write')
        .setOnLocked('skip_locked')
        .getMany();
      const dispatched: string[] = [];
      let failed = false;
      for (const event of pending) {
        if (this.stopped) break;
        if (!(await this.handOn(event))) {
          failed = true;
          break;
        }
        dispatched.push(event.id);
      }
      if (dispatched.length > 0) {
        await manager.update(OutboxEvent, { id: In(dispatched) }, { dispatchedAtMs: this.clock.nowMs() });
      }
      return !failed && pending.length === BATCH;
    });
  }

  /** sql.js: reads a batch, hands each event on and marks it dispatched. True when more may wait. */
  private async dispatchBatch(): Promise<boolean> {
    const pending = await this.db.read((manager) => this.pendingQuery(manager).getMany());
    for (const event of pending) {
      if (this.stopped || !(await this.handOn(event))) {
        return false;
      }
      await this.db.transaction((manager) =>
        manager.update(OutboxEvent, { id: event.id, dispatchedAtMs: IsNull() }, { dispatchedAtMs: this.clock.nowMs() }),
      );
    }
    return pending.length === BATCH;
  }

  private pendingQuery(manager: EntityManager) {
    return manager
      .getRepository(OutboxEvent)
      .createQueryBuilder('event')
      .where('event.dispatchedAtMs IS NULL')
      .orderBy('event.createdAtMs', 'ASC')
      .addOrderBy('event.id', 'ASC')
      .limit(BATCH);
  }

  /** Hands one event on; false (stop this round, leave it pending) when that failed. */
  private async handOn(event: OutboxEvent): Promise<boolean> {
    const data = toOrderCreatedEvent(event);
    try {
      if (this.rabbit.enabled) {
        await this.rabbit.publish(data, event.messageKey);
      } else if (this.queue.enabled) {
        await this.queue.enqueue(data);
      } else {
        await this.processor.process({ id: event.id, name: ORDER_CREATED_JOB, data });
      }
      return true;
    } catch (error) {
      const unrecoverable = (error as Error).name === 'UnrecoverableError';
      this.logger.warn(
        `${event.type} ${event.id} not dispatched: ${(error as Error).message}${unrecoverable ? ' (given up)' : '; retried later'}`,
      );
      return unrecoverable;
    }
  }

  private async deleteExpired(): Promise<number> {
    const cutoffMs = this.clock.nowMs() - this.outbox.retentionMs;
    let deleted = 0;
    for (;;) {
      const count = await this.db.transaction(async (manager) => {
        let expired = manager
          .getRepository(OutboxEvent)
          .createQueryBuilder('event')
          .select('event.id')
          .where('event.dispatchedAtMs < :cutoffMs', { cutoffMs })
          .orderBy('event.dispatchedAtMs', 'ASC')
          .limit(CLEANUP_BATCH);
        // Another instance cleaning at the same time takes other rows instead of waiting.
        if (this.locksRows) expired = expired.setLock('pessimistic_write').setOnLocked('skip_locked');
        const ids = (await expired.getMany()).map((event) => event.id);
        if (ids.length > 0) await manager.delete(OutboxEvent, { id: In(ids) });
        return ids.length;
      });
      deleted += count;
      if (count < CLEANUP_BATCH || this.stopped) {
        if (deleted > 0)
          this.logger.log(`deleted ${deleted} dispatched outbox event(s) older than ${this.outbox.retentionMs} ms`);
        return deleted;
      }
    }
  }
}
