/**
 * The Redis store's waiters (`waitForChange`): they share one subscriber connection, created on
 * first use with `duplicate()` of the store's client; each record has its own channel,
 * unsubscribed when its last waiter leaves; shutdown wakes them all and closes the subscriber.
 */
import type { Cluster, Redis } from 'ioredis';
import type { IdempotencyRecord } from '../interfaces/idempotency-record.interface.js';
import { REDIS_FAIL_FAST_OPTIONS, closeConnection, ignore } from './redis-connection.js';

interface Channel {
  readonly waiters: Set<() => void>;
  /** Settles true once subscribed, false when the subscription failed. */
  readonly subscribed: Promise<boolean>;
}

/** @internal */
export class ChangeWaiters {
  private readonly channels = new Map<string, Channel>();
  private subscriber?: Redis | Cluster;
  private closed = false;

  /** @param client the store's main connection, which the subscriber duplicates. */
  constructor(private readonly client: Redis | Cluster) {}

  /**
   * Resolves on the next message on channel `name`, or after `timeoutMs`. Once subscribed, it
   * reads the record with `read` once and resolves at once when it is no longer in progress.
   * Never rejects (see `RedisIdempotencyStore.waitForChange`).
   */
  wait(name: string, timeoutMs: number, read: () => Promise<IdempotencyRecord | undefined>): Promise<void> {
    if (this.closed || !(timeoutMs > 0)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let settled = false;
      const wake = (): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.leave(name, wake);
        resolve();
      };
      const timer = setTimeout(wake, timeoutMs);
      timer.unref();
      let channel: Channel;
      try {
        channel = this.join(name, wake);
      } catch {
        return; // no subscriber connection: the timeout resolves the wait
      }
      void channel.subscribed.then(async (subscribed) => {
        if (!subscribed || settled) return;
        const record = await read().catch(() => undefined);
        if (record?.state !== 'in_progress') wake();
      });
    });
  }

  /** Wakes every waiter and closes the subscriber; later waits resolve at once. */
  async close(): Promise<void> {
    this.closed = true;
    for (const channel of [...this.channels.values()]) {
      for (const wake of [...channel.waiters]) wake();
    }
    this.channels.clear();
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    if (subscriber) await closeConnection(subscriber, false);
  }

  private join(name: string, wake: () => void): Channel {
    let channel = this.channels.get(name);
    if (!channel) {
      channel = {
        waiters: new Set(),
        subscribed: this.subscriberConnection()
          .subscribe(name)
          .then(
            () => true,
            () => false,
          ),
      };
      this.channels.set(name, channel);
    }
    channel.waiters.add(wake);
    return channel;
  }

  private leave(name: string, wake: () => void): void {
    const channel = this.channels.get(name);
    if (!channel?.waiters.delete(wake) || channel.waiters.size > 0) return;
    this.channels.delete(name);
    if (!this.closed) this.subscriber?.unsubscribe(name).catch(ignore);
  }

  private subscriberConnection(): Redis | Cluster {
    if (!this.subscriber) {
      const subscriber = this.client.isCluster
        ? // A subscription asked for before the cluster is ready waits for it (each waiter has its own timeout).
          (this.client as Cluster).duplicate([], { enableOfflineQueue: true })
        : (this.client as Redis).duplicate({
            lazyConnect: false,
            enableOfflineQueue: true,
            autoResubscribe: true,
            maxRetriesPerRequest: 0,
            commandTimeout: (this.client as Redis).options.commandTimeout ?? REDIS_FAIL_FAST_OPTIONS.commandTimeout,
          });
      subscriber.on('error', ignore);
      subscriber.on('message', (channel: string) => {
        const waiters = this.channels.get(channel)?.waiters;
        if (waiters) for (const wake of [...waiters]) wake();
      });
      this.subscriber = subscriber;
    }
    return this.subscriber;
  }
}
