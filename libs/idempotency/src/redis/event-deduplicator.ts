import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { EVENT_DEDUP_CHECK_LUA } from './event-dedup-script.js';
import { sizeEventDeduplicator, type EventDedupSizing, type EventDedupSizingInput } from './event-dedup-sizing.js';

/** `new`: never seen in the window (certain); `maybe-seen`: seen, or a false positive. @publicApi */
export type DedupVerdict = 'new' | 'maybe-seen';

/** @publicApi */
export interface EventDeduplicatorOptions extends EventDedupSizingInput {
  /** Names the stream, e.g. `'clicks'`: its bitmaps are `<prefix>:{<name>}:<bucket>`, all in one Cluster slot. */
  name: string;
  /** Key prefix. @default 'idem:dedup' */
  prefix?: string;
  /**
   * The time used to pick buckets. Instances whose clocks differ by at most half a bucket
   * (`sizing.bucketMs / 2`) catch every duplicate within the window. @default Date.now
   */
  clock?: () => number;
}

/** Counters of one deduplicator instance since it was created. @publicApi */
export interface DedupStats {
  checks: number;
  /** Checks answered `maybe-seen`: each costs an exact lookup. */
  maybeSeen: number;
  /** Checks answered `new`: exact lookups the filter saved. */
  lookupsSaved: number;
}

const COMMAND = 'idempotencyDedupCheck';
type DedupCommand = (numberOfKeys: number, ...keysAndArgs: (string | number)[]) => Promise<number>;

/**
 * A probabilistic pre-filter for high-volume event streams, in front of an exact check (the
 * idempotency record, or the unique constraint of the table the events land in), on Redis
 * bitmaps: one Bloom filter per time bucket, `k` bit positions per id, a window of `buckets`
 * buckets. `check()` is one Lua call that reads the window and marks the id.
 * - `new`: the id was certainly not checked within the window: skip the exact lookup and apply
 *   the event (its write must still be guarded by the unique constraint, which catches ids older
 *   than the window);
 * - `maybe-seen`: a duplicate, or a false positive (at most `falsePositiveRate` at the expected
 *   rate): ask the exact check.
 * Instances whose clocks differ by up to half a bucket agree: a check also reads the next
 * bucket, and the buckets span half a bucket more than the window.
 * A filter never loses an event: it can only send a new one to the exact check. Memory is at
 * most `sizing.bytes` whatever the traffic (a bucket above its expected load errs more often).
 * All keys of one deduplicator share a hash tag: on a Redis Cluster it lives on one node; split
 * a bigger stream over several deduplicators (e.g. one per partition) to spread it.
 *
 * @example
 * const dedup = new EventDeduplicator(redis, { name: 'clicks', expectedEventsPerSecond: 5_000, windowMs: 3_600_000 });
 * const { applied } = await dedup.runOnce(event.id, () => clicks.exists(event.id), () => clicks.insert(event));
 * @publicApi
 */
export class EventDeduplicator {
  readonly sizing: EventDedupSizing;
  private readonly keyBase: string;
  private readonly clock: () => number;
  private readonly counters = { checks: 0, maybeSeen: 0 };

  constructor(
    private readonly client: Redis | Cluster,
    options: EventDeduplicatorOptions,
  ) {
    if (!/^[^{}]{1,200}$/.test(options.name)) throw new TypeError('name must be 1 to 200 characters without braces');
    this.sizing = sizeEventDeduplicator(options);
    this.keyBase = `${options.prefix ?? 'idem:dedup'}:{${options.name}}`;
    this.clock = options.clock ?? Date.now;
    if (typeof (client as unknown as Record<string, unknown>)[COMMAND] !== 'function') {
      client.defineCommand(COMMAND, { lua: EVENT_DEDUP_CHECK_LUA });
    }
  }

  /** Marks `eventId` as seen and tells whether it may have been seen before (one Lua call). */
  async check(eventId: string): Promise<DedupVerdict> {
    const command = (this.client as unknown as Record<string, DedupCommand>)[COMMAND].bind(this.client);
    return this.count(await command(...this.callArguments(eventId)));
  }

  /** `check` of many ids in one pipeline (one Lua call each); verdicts in the same order. */
  async checkMany(eventIds: readonly string[]): Promise<DedupVerdict[]> {
    if (eventIds.length === 0) return [];
    const pipeline = this.client.pipeline() as unknown as Record<string, (...args: (string | number)[]) => unknown> & {
      exec(): Promise<[Error | null, unknown][] | null>;
    };
    for (const id of eventIds) pipeline[COMMAND](...this.callArguments(id));
    const replies = (await pipeline.exec()) ?? [];
    return replies.map(([error, reply]) => {
      if (error) throw error;
      return this.count(reply as number);
    });
  }

  /**
   * Applies an event once: a `new` id goes straight to `apply`; a `maybe-seen` one asks
   * `isDuplicate` (the exact check) first, and is skipped when it says so. `apply` must be
   * guarded by the exact check's unique constraint too (ids older than the window look new).
   */
  async runOnce<T>(
    eventId: string,
    isDuplicate: () => Promise<boolean>,
    apply: () => Promise<T>,
  ): Promise<{ applied: true; value: T; lookedUp: boolean } | { applied: false; lookedUp: true }> {
    const verdict = await this.check(eventId);
    if (verdict === 'maybe-seen' && (await isDuplicate())) return { applied: false, lookedUp: true };
    return { applied: true, value: await apply(), lookedUp: verdict === 'maybe-seen' };
  }

  /** What this instance has answered so far. */
  stats(): DedupStats {
    return { ...this.counters, lookupsSaved: this.counters.checks - this.counters.maybeSeen };
  }

  /**
   * The bitmap keys a check at `nowMs` reads: the current bucket (where it marks the id), the
   * next one (an instance whose clock is ahead marks ids there), then the older ones.
   */
  keysAt(nowMs: number = this.clock()): string[] {
    const current = Math.floor(nowMs / this.sizing.bucketMs);
    const older = Array.from({ length: this.sizing.buckets }, (_, age) => current - age - 1);
    return [current, current + 1, ...older].map((bucket) => `${this.keyBase}:${bucket}`);
  }

  /** The `k` bit positions of an id (double hashing over SHA-256: h1 + i·h2 mod m). */
  positionsOf(eventId: string): number[] {
    const digest = createHash('sha256').update(eventId).digest();
    const h1 = digest.readUInt32BE(0);
    const h2 = (digest.readUInt32BE(4) | 1) >>> 0;
    const m = this.sizing.bitsPerBucket;
    return Array.from({ length: this.sizing.hashes }, (_, i) => (h1 + i * h2) % m);
  }

  private callArguments(eventId: string): [number, ...(string | number)[]] {
    const nowMs = this.clock();
    const keys = this.keysAt(nowMs);
    const current = Math.floor(nowMs / this.sizing.bucketMs);
    // The current bucket is read until `buckets` later buckets have started; one more bucket of slack for clock skew.
    const expiresAtMs = (current + this.sizing.buckets + 2) * this.sizing.bucketMs;
    return [keys.length, ...keys, expiresAtMs, Math.ceil(this.sizing.bitsPerBucket / 8), ...this.positionsOf(eventId)];
  }

  private count(reply: number): DedupVerdict {
    this.counters.checks += 1;
    if (reply === 1) this.counters.maybeSeen += 1;
    return reply === 1 ? 'maybe-seen' : 'new';
  }
}
