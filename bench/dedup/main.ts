import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { EventDeduplicator, RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { openRedis } from '../../test/support/servers/redis.js';
import { startRedisServer } from '../../test/support/servers/redis-server.js';
import { medianBytesPerKey } from '../driver/redis-stats.js';

/**
 * `npm run bench:dedup [-- --ids 3000000]`: the EventDeduplicator measured on a throwaway
 * redis-server on a spare port (so MEMORY USAGE sees only the bench):
 * 1. the observed false-positive rate on a stream of distinct ids fed at the configured rate
 *    (a hand-moved clock: 40,000 ids/s of simulated time), against the configured rate;
 * 2. bytes per event id remembered (MEMORY USAGE of the live bitmaps) against a full
 *    idempotency record (RedisIdempotencyStore, completed) and a bare `SET id 1 PX` key;
 * 3. the exact-store lookups saved on a stream with 10 % duplicates.
 * Pipelined: one Lua call per id, 2,000 per pipeline.
 */
const RATE = 40_000;
const WINDOW_MS = 30_000;
const BUCKETS = 6;
const TARGET_FP = 0.01;
const BATCH = 2_000;

interface Args {
  ids: number;
}

function parseArgs(argv: readonly string[]): Args {
  const at = argv.indexOf('--ids');
  const ids = at >= 0 ? Number(argv[at + 1]) : 3_000_000;
  if (!Number.isInteger(ids) || ids < 100_000) throw new Error('--ids must be an integer of at least 100000');
  return { ids };
}

/**
 * A clock that moves 1/RATE s per reading (the deduplicator reads it once per id). It starts a
 * day ahead of the real one: bucket expiries are set in its time and Redis applies them in real
 * time, so a simulated stream slower than real time must not see its buckets expire early.
 */
function streamClock(startMs: number = Date.now() + 86_400_000): { now: () => number; peek: () => number } {
  let readings = 0;
  return { now: () => startMs + (readings++ * 1000) / RATE, peek: () => startMs + (readings * 1000) / RATE };
}

async function falsePositives(redis: Redis, totalIds: number) {
  const clock = streamClock();
  const dedup = new EventDeduplicator(redis, {
    name: 'fp',
    prefix: 'bench',
    expectedEventsPerSecond: RATE,
    windowMs: WINDOW_MS,
    buckets: BUCKETS,
    falsePositiveRate: TARGET_FP,
    clock: clock.now,
  });
  const { sizing } = dedup;
  // Every bitmap a check reads is full once the current and `buckets` older buckets of time have
  // passed (the next bucket, read for clock skew, stays empty: this stream has one clock).
  const steadyFrom = Math.ceil((((sizing.buckets + 1) * sizing.bucketMs) / 1000) * RATE);
  let steadyChecks = 0;
  let steadyFalse = 0;
  let allFalse = 0;
  const started = process.hrtime.bigint();
  for (let offset = 0; offset < totalIds; offset += BATCH) {
    const ids = Array.from(
      { length: Math.min(BATCH, totalIds - offset) },
      (_, i) => `evt-${offset + i}-${randomUUID()}`,
    );
    const verdicts = await dedup.checkMany(ids);
    verdicts.forEach((verdict, i) => {
      if (verdict !== 'maybe-seen') return;
      allFalse += 1;
      if (offset + i >= steadyFrom) steadyFalse += 1;
    });
    steadyChecks += Math.max(0, Math.min(offset + ids.length, totalIds) - Math.max(offset, steadyFrom));
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  // Bytes per id: the live bitmaps (MEMORY USAGE) over the ids they hold.
  const keys = dedup.keysAt(clock.peek());
  let bitmapBytes = 0;
  let liveBitmaps = 0;
  for (const key of keys) {
    const bytes = Number((await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
    bitmapBytes += bytes;
    if (bytes > 0) liveBitmaps += 1;
  }
  const currentBucketStart = Math.floor(clock.peek() / sizing.bucketMs) * sizing.bucketMs;
  const idsInLiveBuckets = Math.min(
    totalIds,
    Math.round(((clock.peek() - (currentBucketStart - BUCKETS * sizing.bucketMs)) / 1000) * RATE),
  );
  return {
    sizing,
    checks: totalIds,
    checksPerSecond: Math.round(totalIds / seconds),
    observedFalsePositiveRate: allFalse / totalIds,
    steadyStateChecks: steadyChecks,
    steadyStateFalsePositiveRate: steadyChecks > 0 ? steadyFalse / steadyChecks : undefined,
    liveBitmaps,
    bitmapBytes,
    idsInLiveBitmaps: idsInLiveBuckets,
    bytesPerIdMeasured: bitmapBytes / idsInLiveBuckets,
  };
}

async function fullRecordBytes(redis: Redis, url: string) {
  const store = new RedisIdempotencyStore(url, { prefix: 'bench-rec' });
  await store.onModuleInit?.();
  const body = Buffer.from('{"applied":true}');
  for (let i = 0; i < 2_000; i++) {
    // Shaped as the engine makes them (public API only): a storage id of 32 hex characters and
    // an owner token of 16 random bytes in base64url.
    const id = randomBytes(16).toString('hex');
    const ownerToken = randomBytes(16).toString('base64url');
    const fingerprint = createHash('sha256').update('').digest('base64url');
    await store.claim(id, { ownerToken, fingerprint, leaseMs: 30_000, ttlMs: 86_400_000 });
    await store.complete(id, ownerToken, { statusCode: 200, headers: { 'content-type': 'application/json' }, body });
  }
  const pipeline = redis.pipeline();
  for (let i = 0; i < 2_000; i++) pipeline.set(`bench-seen:evt-${randomUUID()}`, '1', 'PX', WINDOW_MS * 10);
  await pipeline.exec();
  const record = await medianBytesPerKey(redis, 'bench-rec');
  const bareKey = await medianBytesPerKey(redis, 'bench-seen');
  await store.onApplicationShutdown?.();
  return { completedRecordBytes: record, bareSetKeyBytes: bareKey };
}

async function lookupsSaved(redis: Redis, totalIds: number) {
  const clock = streamClock();
  const dedup = new EventDeduplicator(redis, {
    name: 'dups',
    prefix: 'bench',
    expectedEventsPerSecond: RATE,
    windowMs: WINDOW_MS,
    buckets: BUCKETS,
    falsePositiveRate: TARGET_FP,
    clock: clock.now,
  });
  // 10 % of the events are redeliveries of an event seen up to 2,000 events earlier.
  const recent: string[] = [];
  let duplicates = 0;
  for (let offset = 0; offset < totalIds; offset += BATCH) {
    const ids: string[] = [];
    for (let i = 0; i < Math.min(BATCH, totalIds - offset); i++) {
      if (recent.length > 0 && Math.random() < 0.1) {
        ids.push(recent[Math.floor(Math.random() * recent.length)]!);
        duplicates += 1;
      } else {
        const id = `evt-${randomUUID()}`;
        ids.push(id);
        recent.push(id);
        if (recent.length > 2_000) recent.shift();
      }
    }
    await dedup.checkMany(ids);
  }
  const stats = dedup.stats();
  return {
    events: totalIds,
    duplicates,
    exactLookups: stats.maybeSeen,
    lookupsSaved: stats.lookupsSaved,
    savedShare: stats.lookupsSaved / totalIds,
  };
}

export async function runDedupBench(argv: readonly string[], resultsDir: string): Promise<void> {
  const args = parseArgs(argv);
  const server = await startRedisServer({ args: ['--maxmemory-policy', 'noeviction'] });
  const redis = await openRedis(server.url, { commandTimeout: 60_000 });
  try {
    console.log(
      `dedup bench: ${args.ids.toLocaleString('en')} distinct ids at ${RATE}/s (simulated), window ${WINDOW_MS / 1000} s in ${BUCKETS} buckets, target ${TARGET_FP}`,
    );
    const fp = await falsePositives(redis, args.ids);
    const memory = await fullRecordBytes(redis, server.url);
    const saved = await lookupsSaved(redis, Math.min(args.ids, 1_000_000));
    const result = {
      date: new Date().toISOString(),
      rate: RATE,
      windowMs: WINDOW_MS,
      buckets: BUCKETS,
      targetFalsePositiveRate: TARGET_FP,
      ...fp,
      ...memory,
      lookups: saved,
    };
    const { sizing } = fp;
    const lines = [
      `sizing: ${sizing.eventsPerBucket} ids per ${sizing.bucketMs} ms bucket, m = ${sizing.bitsPerBucket} bits, k = ${sizing.hashes}, ${sizing.bucketsChecked} bitmaps read per check`,
      `false positives: configured ${TARGET_FP} (model at full buckets ${sizing.falsePositiveRate.toFixed(5)}); observed ${fp.observedFalsePositiveRate.toFixed(5)} over all ${fp.checks} checks, ${fp.steadyStateFalsePositiveRate?.toFixed(5)} over the ${fp.steadyStateChecks} checks with every bitmap full`,
      `memory: ${fp.bitmapBytes} bytes in ${fp.liveBitmaps} live bitmaps for ${fp.idsInLiveBitmaps} ids = ${fp.bytesPerIdMeasured.toFixed(2)} bytes per id (model ${sizing.bytesPerEvent.toFixed(2)}); a completed idempotency record: ${memory.completedRecordBytes} bytes (median MEMORY USAGE), a bare SET id 1 PX key: ${memory.bareSetKeyBytes} bytes`,
      `lookups: ${saved.events} events with ${saved.duplicates} duplicates: ${saved.exactLookups} exact lookups, ${saved.lookupsSaved} saved (${(saved.savedShare * 100).toFixed(1)} % of events)`,
      `throughput: ${fp.checksPerSecond} checks/s (pipelined, one Lua call each; this machine)`,
    ];
    for (const line of lines) console.log(line);
    await mkdir(resultsDir, { recursive: true });
    await writeFile(join(resultsDir, 'dedup-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
    console.log(`written to ${join(resultsDir, 'dedup-latest.json')}`);
  } finally {
    await redis.quit();
    await server.stop();
  }
}
