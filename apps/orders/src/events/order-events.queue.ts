import { Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { InjectOrdersConfig, type OrdersConfig, type QueueConfig } from '../config/orders.config.js';
import { redactUrl } from '../config/redact-url.js';
import { OrderCreatedProcessor } from '../notifications/order-created.processor.js';
import { ORDER_CREATED_JOB, ORDER_EVENTS_QUEUE, type OrderCreatedEvent } from './order-created.event.js';

const DAY_SECONDS = 86_400;

/**
 * The `order-events` BullMQ queue on the Redis of `REDIS_URL`, and (unless `QUEUE_WORKER=false`)
 * a worker that consumes it with `OrderCreatedProcessor`. Without `REDIS_URL` it is disabled and
 * the outbox relay processes events in-process instead. The queue and the worker get
 * connections of their own (`maxRetriesPerRequest: null`, as BullMQ's blocking commands need),
 * which this class disconnects at shutdown whatever state Redis left them in.
 */
@Injectable()
export class OrderEventsQueue implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('OrderEventsQueue');
  private queue?: Queue;
  private worker?: Worker<OrderCreatedEvent>;
  private readonly connections: Redis[] = [];
  /** The jobs this process is running, so that shutdown can let them finish. */
  private readonly active = new Set<Promise<unknown>>();

  constructor(
    @InjectOrdersConfig('fastStore') private readonly fastStore: OrdersConfig['fastStore'],
    @InjectOrdersConfig('queue') private readonly settings: QueueConfig,
    private readonly processor: OrderCreatedProcessor,
  ) {}

  /** True when events go through BullMQ (`REDIS_URL` is set). */
  get enabled(): boolean {
    return this.fastStore.kind === 'redis';
  }

  onApplicationBootstrap(): void {
    if (this.fastStore.kind !== 'redis') {
      return;
    }
    const { url } = this.fastStore;
    const { prefix, worker, lockMs, stalledIntervalMs } = this.settings;
    // The producer fails fast while Redis is down: the event stays in the outbox for the next scan.
    this.queue = new Queue(ORDER_EVENTS_QUEUE, {
      connection: this.connect(url, { enableOfflineQueue: false }),
      prefix,
    });
    this.queue.on('error', (error) => this.logger.warn(`queue: ${error.message}`));
    if (worker) {
      this.worker = new Worker<OrderCreatedEvent>(
        ORDER_EVENTS_QUEUE,
        (job, token, signal) => this.track(this.processor.process(job, token, signal)),
        {
          connection: this.connect(url),
          prefix,
          concurrency: 4,
          lockDuration: lockMs,
          stalledInterval: stalledIntervalMs,
        },
      );
      this.worker.on('error', (error) => this.logger.warn(`worker: ${error.message}`));
      this.worker.on('failed', (job, error) =>
        this.logger.warn(`job ${job?.name} ${job?.id} failed: ${error.message}`),
      );
      this.logger.log(`Consuming queue "${ORDER_EVENTS_QUEUE}" on ${redactUrl(url)}`);
    }
  }

  /**
   * Adds the event's job, with the event id as job id: while that job exists, adding it again is
   * a no-op, and the processor is idempotent by event id for the times it is not.
   */
  async enqueue(event: OrderCreatedEvent): Promise<void> {
    if (!this.queue) {
      throw new Error('The order-events queue is not running (no REDIS_URL, or the app is not bootstrapped)');
    }
    await this.queue.add(ORDER_CREATED_JOB, event, {
      jobId: event.eventId,
      attempts: 5,
      backoff: { type: 'exponential', delay: 1000 },
      removeOnComplete: { age: DAY_SECONDS },
      removeOnFail: { age: 7 * DAY_SECONDS },
    });
  }

  async onModuleDestroy(): Promise<void> {
    if (this.worker) {
      // The jobs running here may finish (for at most the lock's duration); then the worker is
      // closed without waiting for BullMQ's own bookkeeping, which can wait for ever on a
      // connection that Redis dropped. A job still running is abandoned: its lock lapses and
      // another worker gets it, where the idempotency record makes it take effect once.
      await settledWithin([...this.active], Math.min(this.settings.lockMs, 10_000));
      await settledWithin([this.worker.close(true)], 2000);
    }
    if (this.queue) {
      await settledWithin([this.queue.close()], 2000);
    }
    for (const connection of this.connections) {
      connection.disconnect();
    }
  }

  private connect(url: string, options: { enableOfflineQueue?: boolean } = {}): Redis {
    const connection = new Redis(url, { maxRetriesPerRequest: null, ...options });
    connection.on('error', () => undefined); // reported by the queue's and the worker's 'error' events
    this.connections.push(connection);
    return connection;
  }

  private track<T>(job: Promise<T>): Promise<T> {
    this.active.add(job);
    const forget = () => this.active.delete(job);
    job.then(forget, forget);
    return job;
  }
}

/** Resolves when every promise settled, or after `ms`, whichever comes first. */
async function settledWithin(promises: Promise<unknown>[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  try {
    await Promise.race([Promise.allSettled(promises), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
