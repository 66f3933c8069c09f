import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DataSource } from 'typeorm';
import { IdempotencyModule, MemoryIdempotencyStore, type StoredResponse } from 'nestjs-idempotency';
import { IDEMPOTENCY_TYPEORM_MIGRATIONS, TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { BENCH_ORDER } from '../engine/bench-order.js';

/**
 * `npm run bench:retention [-- --minutes N --ttl-seconds N --concurrency N]`: the durable store
 * alone, in process, at the highest rate this machine sustains, with a compressed TTL so that a
 * short run goes through many expiry cycles while the module's own reaper deletes expired rows.
 * Every sample reports the table's and its indexes' size, live and dead tuples, WAL written,
 * claim latency p50/p99 and the rows the reaper deleted. A flat steady state means the reaper
 * keeps up; a growing table means it does not (docs/capacity.md).
 */
const ORDER_RESPONSE: StoredResponse = {
  statusCode: 201,
  headers: { 'content-type': 'application/json; charset=utf-8', location: '/orders/7b0c2f4e' },
  body: Buffer.from(JSON.stringify(BENCH_ORDER)),
};
const TABLE = 'idempotency_records';

interface Args {
  minutes: number;
  ttlSeconds: number;
  concurrency: number;
  sampleSeconds: number;
  reaperIntervalMs: number;
  reaperBatch: number;
  /** Seconds between the bench's own VACUUMs of the table; 0: none (autovacuum's job). */
  vacuumSeconds?: number;
}

function argsFrom(argv: readonly string[]): Args {
  const quick = argv.includes('--quick');
  const value = (flag: string, fallback: number) => {
    const at = argv.indexOf(flag);
    const parsed = at >= 0 ? Number(argv[at + 1]) : fallback;
    if (!(parsed > 0)) throw new Error(`${flag} needs a positive number`);
    return parsed;
  };
  return {
    minutes: value('--minutes', quick ? 2 : 10),
    ttlSeconds: value('--ttl-seconds', quick ? 20 : 60),
    concurrency: value('--concurrency', 16),
    sampleSeconds: value('--sample-seconds', quick ? 5 : 15),
    reaperIntervalMs: value('--reaper-interval-ms', 1000),
    reaperBatch: value('--reaper-batch', 500),
    vacuumSeconds: argv.includes('--vacuum-seconds') ? value('--vacuum-seconds', 30) : undefined,
  };
}

/** One sample of the table and the workload since the previous one. */
export interface RetentionSample {
  atSeconds: number;
  claimsPerSecond: number;
  claimP50Ms: number;
  claimP99Ms: number;
  completeP99Ms: number;
  liveRows: number;
  deadRows: number;
  tableBytes: number;
  indexBytes: number;
  totalBytes: number;
  reapedPerSecond: number;
  walBytesPerClaim: number;
  /** VACUUMs of the table so far: autovacuum's, and the bench's own. */
  vacuums: number;
}

const quantile = (sorted: number[], q: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

async function tableStats(dataSource: DataSource, schema: string) {
  // Statistics are cumulative and updated by backends when their transactions end; clear the
  // snapshot so each read is current.
  await dataSource.query('SELECT pg_stat_clear_snapshot()');
  const [row] = (await dataSource.query(
    `SELECT pg_relation_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes,
            pg_total_relation_size(c.oid) AS total_bytes, s.n_live_tup, s.n_dead_tup, s.n_tup_del,
            s.autovacuum_count, (SELECT wal_bytes FROM pg_stat_wal) AS wal_bytes
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_stat_user_tables s ON s.relid = c.oid
      WHERE n.nspname = $1 AND c.relname = $2`,
    [schema, TABLE],
  )) as Record<string, string>[];
  const n = (name: string) => Number(row[name]);
  return {
    tableBytes: n('table_bytes'),
    indexBytes: n('index_bytes'),
    totalBytes: n('total_bytes'),
    liveRows: n('n_live_tup'),
    deadRows: n('n_dead_tup'),
    deleted: n('n_tup_del'),
    autovacuums: n('autovacuum_count'),
    walBytes: n('wal_bytes'),
  };
}

export async function runRetentionBench(argv: readonly string[]): Promise<void> {
  const args = argsFrom(argv);
  const databaseUrl = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const schema = `bench_retention_${randomBytes(4).toString('hex')}`;
  const dataSource = new DataSource({
    type: 'postgres',
    url: databaseUrl,
    schema,
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
    extra: { max: args.concurrency + 4 },
  });
  await dataSource.initialize();
  await dataSource.query(`CREATE SCHEMA "${schema}"`);
  await dataSource.runMigrations();
  const store = new TypeOrmIdempotencyStore(dataSource);
  // Production servers run autovacuum; a test server may not. Without it nothing reclaims the
  // dead rows of the completions and the reaper's deletes, so the bench vacuums on its own then.
  const [{ autovacuum }] = (await dataSource.query('SHOW autovacuum')) as { autovacuum: string }[];
  args.vacuumSeconds ??= autovacuum === 'on' ? 0 : 30;
  if (autovacuum !== 'on') {
    console.log(`autovacuum is ${autovacuum} on this server: the bench runs VACUUM every ${args.vacuumSeconds} s`);
  }
  const table = `"${schema}"."${TABLE}"`;
  const endAt = Date.now() + args.minutes * 60_000;
  let vacuums = 0;
  const vacuumer = (async () => {
    while (args.vacuumSeconds && Date.now() < endAt) {
      await new Promise((resolve) => setTimeout(resolve, args.vacuumSeconds! * 1000));
      await dataSource.query(`VACUUM ${table}`);
      vacuums += 1;
    }
  })();

  // The module's own reaper, as an application runs it (`reaper: { intervalMs, batchSize }`).
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store: new MemoryIdempotencyStore(),
        durableStore: store,
        anonymousScope: () => 'bench',
        reaper: { intervalMs: args.reaperIntervalMs, batchSize: args.reaperBatch },
      }),
    ],
  })
  class RetentionModule {}
  const app: INestApplicationContext = await NestFactory.createApplicationContext(RetentionModule, { logger: false });

  const ttlMs = args.ttlSeconds * 1000;
  let claimLatencies: number[] = [];
  let completeLatencies: number[] = [];
  let claims = 0;
  const workers = Array.from({ length: args.concurrency }, async () => {
    while (Date.now() < endAt) {
      const key = randomUUID();
      const ownerToken = randomBytes(16).toString('base64url');
      const started = performance.now();
      const claimed = await store.claim(key, { ownerToken, fingerprint: 'bench', leaseMs: 30_000, ttlMs });
      const afterClaim = performance.now();
      if (claimed.kind !== 'claimed') throw new Error(`a fresh key was not claimed: ${claimed.kind}`);
      if (!(await store.complete(key, ownerToken, ORDER_RESPONSE))) throw new Error('completion refused');
      claimLatencies.push(afterClaim - started);
      completeLatencies.push(performance.now() - afterClaim);
      claims += 1;
    }
  });

  console.log(
    `retention bench: ${args.minutes} min, TTL ${args.ttlSeconds} s, ${args.concurrency} workers, ` +
      `reaper every ${args.reaperIntervalMs} ms (batches of ${args.reaperBatch}), schema ${schema}`,
  );
  console.log(
    '   t s  claims/s  claim p50/p99 ms  complete p99  live rows  dead rows  table MB  index MB  reaped/s  WAL B/claim  vacuums',
  );
  const samples: RetentionSample[] = [];
  const startedAt = Date.now();
  let previous = await tableStats(dataSource, schema);
  let previousAt = Date.now();
  const sampler = (async () => {
    while (Date.now() < endAt) {
      await new Promise((resolve) => setTimeout(resolve, args.sampleSeconds * 1000));
      const stats = await tableStats(dataSource, schema);
      const now = Date.now();
      const seconds = (now - previousAt) / 1000;
      const sortedClaims = claimLatencies.sort((a, b) => a - b);
      const sortedCompletes = completeLatencies.sort((a, b) => a - b);
      const windowClaims = sortedClaims.length;
      claimLatencies = [];
      completeLatencies = [];
      const sample: RetentionSample = {
        atSeconds: Math.round((now - startedAt) / 1000),
        claimsPerSecond: windowClaims / seconds,
        claimP50Ms: quantile(sortedClaims, 0.5),
        claimP99Ms: quantile(sortedClaims, 0.99),
        completeP99Ms: quantile(sortedCompletes, 0.99),
        liveRows: stats.liveRows,
        deadRows: stats.deadRows,
        tableBytes: stats.tableBytes,
        indexBytes: stats.indexBytes,
        totalBytes: stats.totalBytes,
        reapedPerSecond: (stats.deleted - previous.deleted) / seconds,
        walBytesPerClaim: windowClaims > 0 ? (stats.walBytes - previous.walBytes) / windowClaims : 0,
        vacuums: stats.autovacuums + vacuums,
      };
      samples.push(sample);
      console.log(formatSample(sample));
      previous = stats;
      previousAt = now;
    }
  })();
  await Promise.all([...workers, sampler, vacuumer]);
  await app.close();
  const finalStats = await tableStats(dataSource, schema);
  await dataSource.query(`DROP SCHEMA "${schema}" CASCADE`);
  await dataSource.destroy();

  const summary = summarize(samples, args, claims, finalStats.totalBytes);
  console.log(
    `\nsteady state (after the first TTL): ${summary.steadyClaimsPerSecond.toFixed(0)} claims/s, ` +
      `${summary.bytesPerRecordBeforeExpiry.toFixed(0)} bytes per record before the first expiry and ` +
      `${summary.bytesPerLiveRow.toFixed(0)} per live row at the end (table + indexes), ` +
      `WAL ${summary.walBytesPerClaim.toFixed(0)} B per claim+complete, size growth over the second half ` +
      `${(summary.sizeGrowthSecondHalf * 100).toFixed(1)} %, claim p99 first/last steady sample ` +
      `${summary.firstSteadyClaimP99Ms.toFixed(2)}/${summary.lastClaimP99Ms.toFixed(2)} ms`,
  );
  const resultsDir = join(process.cwd(), 'bench/results');
  await mkdir(resultsDir, { recursive: true });
  const out = join(resultsDir, 'retention-latest.json');
  await writeFile(
    out,
    JSON.stringify({ at: new Date().toISOString(), node: process.version, args, summary, samples }, null, 2) + '\n',
  );
  console.log(`written ${out}`);
}

function formatSample(s: RetentionSample): string {
  const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).padStart(8);
  return (
    `${String(s.atSeconds).padStart(5)} ${s.claimsPerSecond.toFixed(0).padStart(9)} ` +
    `${`${s.claimP50Ms.toFixed(2)}/${s.claimP99Ms.toFixed(2)}`.padStart(17)} ${s.completeP99Ms.toFixed(2).padStart(12)} ` +
    `${String(s.liveRows).padStart(10)} ${String(s.deadRows).padStart(10)} ${mb(s.tableBytes)}  ${mb(s.indexBytes)} ` +
    `${s.reapedPerSecond.toFixed(0).padStart(9)} ${s.walBytesPerClaim.toFixed(0).padStart(12)} ${String(s.vacuums).padStart(8)}`
  );
}

/** What docs/capacity.md quotes: the steady state, once a full TTL of rows exists. */
function summarize(samples: RetentionSample[], args: Args, claims: number, finalBytes: number) {
  const steady = samples.filter((s) => s.atSeconds > args.ttlSeconds * 1.5);
  const half = steady.slice(Math.floor(steady.length / 2));
  const mean = (values: number[]) => (values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length);
  const sizeAtHalf = half[0]?.totalBytes ?? 0;
  const sizeAtEnd = half.at(-1)?.totalBytes ?? 0;
  const liveAtEnd = half.at(-1)?.liveRows ?? 0;
  // Before anything expires every row is live: what one record costs on disk, its dead update included.
  const beforeExpiry = samples.filter((s) => s.atSeconds < args.ttlSeconds).at(-1);
  return {
    bytesPerRecordBeforeExpiry:
      beforeExpiry && beforeExpiry.liveRows > 0 ? beforeExpiry.totalBytes / beforeExpiry.liveRows : 0,
    claims,
    steadyClaimsPerSecond: mean(steady.map((s) => s.claimsPerSecond)),
    steadyReapedPerSecond: mean(steady.map((s) => s.reapedPerSecond)),
    bytesPerLiveRow: liveAtEnd > 0 ? sizeAtEnd / liveAtEnd : 0,
    walBytesPerClaim: mean(steady.map((s) => s.walBytesPerClaim)),
    sizeGrowthSecondHalf: sizeAtHalf > 0 ? (sizeAtEnd - sizeAtHalf) / sizeAtHalf : 0,
    firstSteadyClaimP99Ms: steady[0]?.claimP99Ms ?? 0,
    lastClaimP99Ms: steady.at(-1)?.claimP99Ms ?? 0,
    finalTotalBytes: finalBytes,
  };
}
