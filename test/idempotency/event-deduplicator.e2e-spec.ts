import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import { EventDeduplicator, type EventDeduplicatorOptions } from 'nestjs-idempotency/redis';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../support/servers/postgres.js';
import { deleteKeys, openRedis } from '../support/servers/redis.js';
import { openRedisCluster, startRedisCluster, type ThrowawayRedisCluster } from '../support/servers/redis-cluster.js';
import { askNode } from '../support/servers/redis-server.js';

/** A clock the tests move by hand: buckets and the window are crossed without sleeping. */
class ManualClock {
  constructor(public nowMs = Date.now()) {}
  readonly now = () => this.nowMs;
  advance(ms: number): void {
    this.nowMs += ms;
  }
}

interface Target {
  client: Redis | Cluster;
  /** The slot of a key, when it is a Cluster. */
  slotOf?(key: string): Promise<number>;
  tearDown(): Promise<void>;
}

/**
 * `EventDeduplicator` on a real Redis and on a real Redis Cluster (three masters on spare
 * ports): verdicts, the window, pipelining, hash-slot placement. Time is a hand-moved clock.
 */
describe.each<[string, () => Promise<Target>]>([
  [
    'Redis',
    async () => {
      const client = await openRedis();
      return { client, tearDown: async () => void (await client.quit()) };
    },
  ],
  [
    'Redis Cluster',
    async () => {
      const cluster: ThrowawayRedisCluster = await startRedisCluster(3);
      const client = await openRedisCluster(cluster);
      return {
        client,
        slotOf: async (key) => Number(await askNode(cluster.nodes[0].port, 'CLUSTER', 'KEYSLOT', key)),
        tearDown: async () => {
          client.disconnect();
          await cluster.stop();
        },
      };
    },
  ],
])('EventDeduplicator on %s', (_name, setUp) => {
  let target: Target;
  const prefix = `idem-dedup-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    target = await setUp();
  }, 60_000);
  afterAll(async () => {
    if (!target) return;
    if (!target.slotOf) await deleteKeys(target.client as Redis, prefix);
    await target.tearDown();
  });

  const dedup = (options: Partial<EventDeduplicatorOptions> & { clock?: () => number } = {}) =>
    new EventDeduplicator(target.client, {
      name: `stream-${randomUUID().slice(0, 8)}`,
      prefix,
      expectedEventsPerSecond: 1_000,
      windowMs: 60_000,
      buckets: 6,
      falsePositiveRate: 1e-6,
      ...options,
    });

  it('an id is new the first time, and maybe-seen when it comes again', async () => {
    const filter = dedup();
    const id = randomUUID();
    expect(await filter.check(id)).toBe('new');
    expect(await filter.check(id)).toBe('maybe-seen');
    expect(await filter.check(randomUUID())).toBe('new');
    expect(filter.stats()).toEqual({ checks: 3, maybeSeen: 1, lookupsSaved: 2 });
  });

  it('a duplicate is caught at any age within the window (whatever bucket it fell in), and forgotten after it', async () => {
    const clock = new ManualClock();
    const name = `stream-${randomUUID().slice(0, 8)}`;
    const filter = dedup({ clock: clock.now, name });
    const { bucketMs, windowMs, buckets } = filter.sizing;
    // One id per age to test, all seen now; each is asked again once, at its age.
    const ages = [...Array.from({ length: buckets }, (_, i) => (i + 1) * bucketMs - 1), windowMs];
    const ids = ages.map(() => randomUUID());
    const forgotten = randomUUID();
    expect(await filter.checkMany([...ids, forgotten])).toEqual([...ids, forgotten].map(() => 'new'));
    const start = clock.nowMs;
    for (const [i, age] of ages.entries()) {
      clock.nowMs = start + age;
      // Another instance on the same stream (a second consumer process) sees what this one marked.
      expect(await dedup({ clock: clock.now, name }).check(ids[i])).toBe('maybe-seen');
    }
    clock.nowMs = start + windowMs + 2 * bucketMs;
    expect(await filter.check(forgotten)).toBe('new');
  });

  it('forgets an id once the window has passed, and its bitmaps expire', async () => {
    const clock = new ManualClock();
    const name = `stream-${randomUUID().slice(0, 8)}`;
    const filter = dedup({ clock: clock.now, name });
    const id = randomUUID();
    expect(await filter.check(id)).toBe('new');
    const [bucket] = filter.keysAt();
    const expiresAtMs = Number(await target.client.pexpiretime(bucket));
    expect(expiresAtMs).toBe(
      (Math.floor(clock.nowMs / filter.sizing.bucketMs) + filter.sizing.buckets + 2) * filter.sizing.bucketMs,
    );
    // Past the buckets a check reads: the window and the half bucket of clock skew they also span.
    clock.advance((filter.sizing.buckets + 1) * filter.sizing.bucketMs);
    expect(filter.keysAt()).not.toContain(bucket);
    expect(await filter.check(id)).toBe('new');
  });

  it('checkMany pipelines one Lua call per id: 2,000 new ids, then 2,000 duplicates (no false negatives)', async () => {
    const filter = dedup({ expectedEventsPerSecond: 100_000 });
    const ids = Array.from({ length: 2_000 }, () => randomUUID());
    const first = await filter.checkMany(ids);
    expect(first.filter((verdict) => verdict === 'new')).toHaveLength(2_000);
    const again = await filter.checkMany(ids);
    expect(again.every((verdict) => verdict === 'maybe-seen')).toBe(true);
    expect(filter.stats()).toEqual({ checks: 4_000, maybeSeen: 2_000, lookupsSaved: 2_000 });
  });

  it('keeps every bitmap of one deduplicator under one hash tag (one Cluster slot)', async () => {
    const filter = dedup();
    await filter.check(randomUUID());
    const keys = filter.keysAt();
    expect(new Set(keys.map((key) => /\{[^}]+\}/.exec(key)?.[0])).size).toBe(1);
    if (target.slotOf) {
      const slots = await Promise.all(keys.map((key) => target.slotOf!(key)));
      expect(new Set(slots).size).toBe(1);
    }
  });
});

/**
 * The pre-filter in front of the exact check: a table with a unique event id (PostgreSQL). New
 * ids are inserted without a lookup; maybe-seen ones are looked up first. Every event lands once.
 */
describe('EventDeduplicator in front of a unique constraint (PostgreSQL)', () => {
  let redis: Redis;
  let db: pg.Client;
  let schema: string;
  const prefix = `idem-dedup-pg-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    redis = await openRedis();
    schema = await createThrowawaySchema('dedup_e2e');
    db = await connectPostgresOrFail();
    await db.query(
      `CREATE TABLE "${schema}".clicks (event_id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
  });
  afterAll(async () => {
    await db?.end();
    if (schema) await dropSchema(schema);
    if (redis) {
      await deleteKeys(redis, prefix);
      await redis.quit();
    }
  });

  it('a stream with duplicates lands once per event, and only maybe-seen ids cost a lookup', async () => {
    const filter = new EventDeduplicator(redis, {
      name: 'clicks',
      prefix,
      expectedEventsPerSecond: 10_000,
      windowMs: 60_000,
      falsePositiveRate: 1e-6,
    });
    const unique = Array.from({ length: 200 }, () => randomUUID());
    const stream = [...unique, ...unique.slice(0, 100), ...unique.slice(50, 60)];
    let lookups = 0;
    let applied = 0;
    for (const id of stream) {
      const result = await filter.runOnce(
        id,
        async () => {
          lookups += 1;
          return (await db.query(`SELECT 1 FROM "${schema}".clicks WHERE event_id = $1`, [id])).rowCount === 1;
        },
        async () => {
          // The unique constraint still guards the write: an id older than the window looks new.
          await db.query(`INSERT INTO "${schema}".clicks (event_id) VALUES ($1)`, [id]);
          applied += 1;
        },
      );
      expect(result.lookedUp).toBe(result.applied ? false : true);
    }
    const rows = await db.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".clicks`);
    expect(Number(rows.rows[0].n)).toBe(200);
    expect(applied).toBe(200);
    expect(lookups).toBe(110);
    expect(filter.stats()).toEqual({ checks: 310, maybeSeen: 110, lookupsSaved: 200 });
  });
});

/**
 * Two instances of one stream whose clocks disagree (fast-check, on the real Redis): instance B's
 * clock is off by up to half a bucket either way. Events of a few ids arrive at random times,
 * each checked by either instance; no check of an id seen within `windowMs` before may say `new`.
 */
describe('EventDeduplicator on two instances with skewed clocks (Redis)', () => {
  let redis: Redis;
  const prefix = `idem-dedup-skew-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    redis = await openRedis();
  });
  afterAll(async () => {
    if (!redis) return;
    await deleteKeys(redis, prefix);
    await redis.quit();
  });

  it('an id marked by an instance 1 ms ahead, across a bucket edge, is maybe-seen to the one behind (runOnce applies it once)', async () => {
    const options = { name: `edge-${randomUUID().slice(0, 8)}`, prefix, expectedEventsPerSecond: 10, windowMs: 60_000 };
    const { bucketMs } = new EventDeduplicator(redis, options).sizing;
    // The last millisecond of a bucket an hour from now: the instance ahead is already in the next one.
    const behindMs = (Math.floor((Date.now() + 3_600_000) / bucketMs) + 1) * bucketMs - 1;
    const ahead = new EventDeduplicator(redis, { ...options, clock: () => behindMs + 1 });
    const behind = new EventDeduplicator(redis, { ...options, clock: () => behindMs });
    let applied = 0;
    const apply = async () => void (applied += 1);
    const exact = async () => applied > 0;
    expect(await ahead.runOnce('order-1', exact, apply)).toMatchObject({ applied: true, lookedUp: false });
    expect(await behind.runOnce('order-1', exact, apply)).toEqual({ applied: false, lookedUp: true });
    expect(applied).toBe(1);
  });

  it('reports no duplicate within the window as new, whichever instance marked it and however the buckets fall', async () => {
    let duplicatesWithinWindow = 0;
    const scenario = fc
      .record({ windowMs: fc.integer({ min: 1_000, max: 120_000 }), buckets: fc.integer({ min: 1, max: 8 }) })
      .chain(({ windowMs, buckets }) => {
        const halfBucket = Math.floor(Math.ceil((2 * windowMs) / (2 * buckets - 1)) / 2);
        return fc.record({
          windowMs: fc.constant(windowMs),
          buckets: fc.constant(buckets),
          // How far B's clock is from A's, at most half a bucket either way.
          skewMs: fc.integer({ min: -halfBucket, max: halfBucket }),
          // Where in a bucket the scenario starts.
          phaseMs: fc.integer({ min: 0, max: 4 * windowMs }),
          events: fc.array(
            fc.record({
              id: fc.integer({ min: 0, max: 3 }),
              atMs: fc.oneof(
                fc.integer({ min: 0, max: 2 * windowMs }),
                // Right at the window's edge, where the buckets are tightest.
                fc.integer({ min: windowMs - 50, max: windowMs + 50 }),
              ),
              instance: fc.constantFrom(0, 1),
            }),
            { minLength: 2, maxLength: 10 },
          ),
        });
      });
    await fc.assert(
      fc.asyncProperty(scenario, async ({ windowMs, buckets, skewMs, phaseMs, events }) => {
        const name = `skew-${randomUUID().slice(0, 8)}`;
        // An hour ahead of the server's clock, so that no bitmap expires while the scenario runs.
        const startMs = Date.now() + 3_600_000 + phaseMs;
        let nowMs = startMs;
        const options = { name, prefix, expectedEventsPerSecond: 10, windowMs, buckets, falsePositiveRate: 1e-6 };
        const instances = [
          new EventDeduplicator(redis, { ...options, clock: () => nowMs }),
          new EventDeduplicator(redis, { ...options, clock: () => nowMs + skewMs }),
        ];
        const seen: { id: number; atMs: number }[] = [];
        for (const event of [...events].sort((a, b) => a.atMs - b.atMs)) {
          nowMs = startMs + event.atMs;
          const verdict = await instances[event.instance].check(`event-${event.id}`);
          const earlier = seen.some((s) => s.id === event.id && event.atMs - s.atMs <= windowMs);
          if (earlier) duplicatesWithinWindow += 1;
          if (earlier && verdict === 'new') return false;
          seen.push(event);
        }
        return true;
      }),
      { numRuns: 300 },
    );
    // The property was exercised: duplicates within the window were checked.
    expect(duplicatesWithinWindow).toBeGreaterThan(300);
  });
});
