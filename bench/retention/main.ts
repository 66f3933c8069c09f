import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { DataSource } from 'typeorm';
import { IdempotencyModule, MemoryIdempotencyStore, type StoredResponse } from 'nestjs-idempotency';
import {
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
  TypeOrmIdempotencyStore,
  type TypeOrmIdempotencyStoreOptions,
} from 'nestjs-idempotency/typeorm';
import { BENCH_ORDER } from '../engine/bench-order.js';

/**
 * `npm run bench:retention [-- --minutes N --ttl-seconds N --concurrency N --rate N --table T]`:
 * the durable store alone, in process, with a compressed TTL so that a short run goes through
 * many expiry cycles while the module's own reaper expires records. `--table both` (the default)
 * runs the default table (the batched reaper deletes rows) and the partitioned one (the reaper
 * drops whole partitions, `--partition-seconds`, default the TTL) side by side, at the same rate
 * (`--rate` claims/s each) and TTL, each in a schema of its own; `--table batched` or
 * `--table partitioned` runs one, as fast as it goes unless `--rate` is given. Every sample
 * reports the table's and its indexes' size (all partitions), live and dead tuples, claim latency
 * p50/p99, the records the reaper expired, and (one table only: it is server-wide) WAL written.
 * With autovacuum off (a test server) the bench runs VACUUM every 30 s (`--vacuum-seconds N`), or
 * never (`--no-vacuum`). A flat steady state means expiry keeps up; a growing table means it does
 * not (docs/capacity.md).
 */
const ORDER_RESPONSE: StoredResponse = {
  statusCode: 201,
  headers: { 'content-type': 'application/json; charset=utf-8', location: '/orders/7b0c2f4e' },
  body: Buffer.from(JSON.stringify(BENCH_ORDER)),
};
const TABLE = 'idempotency_records';
const TABLE_KINDS = ['batched', 'partitioned'] as const;
type TableKind = (typeof TABLE_KINDS)[number];

interface Args {
  tables: TableKind[];
  /** Claims per second of each table; undefined: as fast as it goes. */
  rate?: number;
  partitionSeconds: number;
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
  const tableAt = argv.indexOf('--table');
  const table = tableAt >= 0 ? argv[tableAt + 1] : 'both';
  if (![...TABLE_KINDS, 'both'].includes(table)) throw new Error('--table takes batched, partitioned or both');
  const tables = table === 'both' ? [...TABLE_KINDS] : [table as TableKind];
  const ttlSeconds = value('--ttl-seconds', quick ? 20 : 60);
  return {
    tables,
    rate: argv.includes('--rate') || tables.length > 1 ? value('--rate', 150) : undefined,
    partitionSeconds: value('--partition-seconds', ttlSeconds),
    minutes: value('--minutes', quick ? 2 : 10),
    ttlSeconds,
    concurrency: value('--concurrency', 16),
    sampleSeconds: value('--sample-seconds', quick ? 5 : 15),
    reaperIntervalMs: value('--reaper-interval-ms', 1000),
    reaperBatch: value('--reaper-batch', 500),
    // --no-vacuum: neither the bench's VACUUM nor autovacuum's help is asked for (autovacuum off): the worst case.
    vacuumSeconds: argv.includes('--no-vacuum')
      ? 0
      : argv.includes('--vacuum-seconds')
        ? value('--vacuum-seconds', 30)
        : undefined,
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
  /** Server-wide WAL over this table's claims: null when two tables run at once. */
  walBytesPerClaim: number | null;
  /** Partitions attached (1: the default table). */
  partitions: number;
  /** VACUUMs of the table so far: autovacuum's, and the bench's own. */
  vacuums: number;
}

const quantile = (sorted: number[], q: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/** Sizes and tuple counts of the table, summed over its partitions (the default table: itself). */
async function tableStats(dataSource: DataSource, schema: string) {
  // Statistics are cumulative and updated by backends when their transactions end; clear the
  // snapshot so each read is current.
  await dataSource.query('SELECT pg_stat_clear_snapshot()');
  const [row] = (await dataSource.query(
    `SELECT COALESCE(sum(pg_relation_size(p.relid)), 0) AS table_bytes,
            COALESCE(sum(pg_indexes_size(p.relid)), 0) AS index_bytes,
            COALESCE(sum(pg_total_relation_size(p.relid)), 0) AS total_bytes,
            COALESCE(sum(s.n_live_tup), 0) AS n_live_tup, COALESCE(sum(s.n_dead_tup), 0) AS n_dead_tup,
            COALESCE(sum(s.autovacuum_count), 0) AS autovacuum_count, count(*) AS partitions,
            (SELECT wal_bytes FROM pg_stat_wal) AS wal_bytes
       FROM (SELECT relid FROM pg_partition_tree(CAST($1 AS regclass)) WHERE isleaf
             UNION ALL SELECT oid FROM pg_class WHERE oid = CAST($1 AS regclass) AND relkind = 'r') p
       LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid`,
    [`"${schema}"."${TABLE}"`],
  )) as Record<string, string>[];
  const n = (name: string) => Number(row[name]);
  return {
    tableBytes: n('table_bytes'),
    indexBytes: n('index_bytes'),
    totalBytes: n('total_bytes'),
    liveRows: n('n_live_tup'),
    deadRows: n('n_dead_tup'),
    autovacuums: n('autovacuum_count'),
    partitions: n('partitions'),
    walBytes: n('wal_bytes'),
  };
}

/** The store, counting the records its `deleteExpired` (the reaper) expired: rows deleted, or rows of dropped partitions. */
class CountingStore extends TypeOrmIdempotencyStore {
  reaped = 0;
  override async deleteExpired(batchSize: number, nowMs?: number): Promise<number> {
    const expired = await super.deleteExpired(batchSize, nowMs);
    this.reaped += expired;
    return expired;
  }
}

export async function runRetentionBench(argv: readonly string[]): Promise<void> {
  const args = argsFrom(argv);
  const databaseUrl = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const probe = await new DataSource({ type: 'postgres', url: databaseUrl }).initialize();
  // Production servers run autovacuum; a test server may not. Without it nothing reclaims the
  // dead rows of the completions and the reaper's deletes, so the bench vacuums on its own then.
  const [{ autovacuum }] = (await probe.query('SHOW autovacuum')) as { autovacuum: string }[];
  await probe.destroy();
  args.vacuumSeconds ??= autovacuum === 'on' ? 0 : 30;
  if (autovacuum !== 'on') {
    console.log(
      `autovacuum is ${autovacuum} on this server: ` +
        (args.vacuumSeconds ? `the bench runs VACUUM every ${args.vacuumSeconds} s` : 'nothing vacuums (--no-vacuum)'),
    );
  }
  console.log(
    `retention bench: ${args.tables.join(' and ')}, ${args.minutes} min, TTL ${args.ttlSeconds} s, ` +
      `${args.rate === undefined ? 'as fast as it goes' : `${args.rate} claims/s each`}, ${args.concurrency} workers each, ` +
      `reaper every ${args.reaperIntervalMs} ms (batches of ${args.reaperBatch}; partitions of ${args.partitionSeconds} s)`,
  );
  console.log(
    'table          t s  claims/s  claim p50/p99 ms  complete p99  live rows  dead rows  table MB  index MB  reaped/s  WAL B/claim  vacuums  parts',
  );
  const endAt = Date.now() + args.minutes * 60_000;
  const runs = await Promise.all(args.tables.map((kind) => runTable(kind, args, databaseUrl, endAt)));
  const tables = Object.fromEntries(runs.map((run) => [run.kind, { summary: run.summary, samples: run.samples }]));
  console.log('');
  for (const run of runs) {
    const summary = run.summary;
    console.log(
      `${run.kind}: steady state (after 1.5 TTL): ${summary.steadyClaimsPerSecond.toFixed(0)} claims/s, ` +
        `${summary.steadyReapedPerSecond.toFixed(0)} expired/s, ` +
        `${summary.bytesPerRecordBeforeExpiry.toFixed(0)} bytes per record before the first expiry, ` +
        `size (table + indexes) min/max ${mib(summary.steadyMinBytes)}/${mib(summary.steadyMaxBytes)} MB, ` +
        `growth over the second half ${(summary.sizeGrowthSecondHalf * 100).toFixed(1)} %, ` +
        `dead rows max ${summary.steadyMaxDeadRows}, claim p50 median ${summary.steadyClaimP50Ms.toFixed(2)} ms, ` +
        `p99 median/max ${summary.steadyClaimP99MedianMs.toFixed(2)}/${summary.steadyClaimP99MaxMs.toFixed(2)} ms, ` +
        `first/last ${summary.firstSteadyClaimP99Ms.toFixed(2)}/${summary.lastClaimP99Ms.toFixed(2)} ms` +
        (summary.walBytesPerClaim === null ? '' : `, WAL ${summary.walBytesPerClaim.toFixed(0)} B per claim`),
    );
  }
  const resultsDir = join(process.cwd(), 'bench/results');
  await mkdir(resultsDir, { recursive: true });
  const out = join(resultsDir, 'retention-latest.json');
  await writeFile(
    out,
    JSON.stringify({ at: new Date().toISOString(), node: process.version, args, tables }, null, 2) + '\n',
  );
  console.log(`written ${out}`);
}

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/** One table's run: its schema, store, the module's reaper, the workers at the rate, the samples. */
async function runTable(kind: TableKind, args: Args, databaseUrl: string, endAt: number) {
  const schema = `bench_retention_${kind}_${randomBytes(4).toString('hex')}`;
  const dataSource = new DataSource({
    type: 'postgres',
    url: databaseUrl,
    schema,
    migrations: kind === 'batched' ? IDEMPOTENCY_TYPEORM_MIGRATIONS : IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
    extra: { max: args.concurrency + 4 },
  });
  await dataSource.initialize();
  await dataSource.query(`CREATE SCHEMA "${schema}"`);
  await dataSource.runMigrations();
  const options: TypeOrmIdempotencyStoreOptions =
    kind === 'partitioned' ? { partitioning: { partitionMs: args.partitionSeconds * 1000 } } : {};
  const store = new CountingStore(dataSource, options);
  const table = `"${schema}"."${TABLE}"`;
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
  const startedAt = Date.now();
  let issued = 0;
  const workers = Array.from({ length: args.concurrency }, async () => {
    while (Date.now() < endAt) {
      // At a rate: each claim has its slot on the clock; a worker late for its slot starts at once.
      if (args.rate !== undefined) {
        const slot = startedAt + (issued++ * 1000) / args.rate;
        if (slot > Date.now()) await new Promise((resolve) => setTimeout(resolve, slot - Date.now()));
        if (Date.now() >= endAt) break;
      }
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

  const samples: RetentionSample[] = [];
  let previous = await tableStats(dataSource, schema);
  let previousReaped = 0;
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
        reapedPerSecond: (store.reaped - previousReaped) / seconds,
        walBytesPerClaim:
          args.tables.length === 1 && windowClaims > 0 ? (stats.walBytes - previous.walBytes) / windowClaims : null,
        vacuums: stats.autovacuums + vacuums,
        partitions: stats.partitions,
      };
      samples.push(sample);
      console.log(`${kind.padEnd(12)} ${formatSample(sample)}`);
      previous = stats;
      previousReaped = store.reaped;
      previousAt = now;
    }
  })();
  await Promise.all([...workers, sampler, vacuumer]);
  await app.close();
  const finalStats = await tableStats(dataSource, schema);
  await dataSource.query(`DROP SCHEMA "${schema}" CASCADE`);
  await dataSource.destroy();
  return { kind, samples, summary: summarize(samples, args, claims, finalStats.totalBytes) };
}

function formatSample(s: RetentionSample): string {
  const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1).padStart(8);
  return (
    `${String(s.atSeconds).padStart(5)} ${s.claimsPerSecond.toFixed(0).padStart(9)} ` +
    `${`${s.claimP50Ms.toFixed(2)}/${s.claimP99Ms.toFixed(2)}`.padStart(17)} ${s.completeP99Ms.toFixed(2).padStart(12)} ` +
    `${String(s.liveRows).padStart(10)} ${String(s.deadRows).padStart(10)} ${mb(s.tableBytes)}  ${mb(s.indexBytes)} ` +
    `${s.reapedPerSecond.toFixed(0).padStart(9)} ${(s.walBytesPerClaim === null ? '-' : s.walBytesPerClaim.toFixed(0)).padStart(12)} ` +
    `${String(s.vacuums).padStart(8)} ${String(s.partitions).padStart(6)}`
  );
}

/** What docs/capacity.md quotes: the steady state, once a full TTL of rows exists. */
function summarize(samples: RetentionSample[], args: Args, claims: number, finalBytes: number) {
  const steady = samples.filter((s) => s.atSeconds > args.ttlSeconds * 1.5);
  const half = steady.slice(Math.floor(steady.length / 2));
  const mean = (values: number[]) => (values.length === 0 ? 0 : values.reduce((a, b) => a + b, 0) / values.length);
  const median = (values: number[]) =>
    quantile(
      [...values].sort((a, b) => a - b),
      0.5,
    );
  const sizeAtHalf = half[0]?.totalBytes ?? 0;
  const sizeAtEnd = half.at(-1)?.totalBytes ?? 0;
  const liveAtEnd = half.at(-1)?.liveRows ?? 0;
  const wal = steady.map((s) => s.walBytesPerClaim).filter((w): w is number => w !== null);
  // Before anything expires every row is live: what one record costs on disk, its dead update included.
  const beforeExpiry = samples.filter((s) => s.atSeconds < args.ttlSeconds).at(-1);
  return {
    bytesPerRecordBeforeExpiry:
      beforeExpiry && beforeExpiry.liveRows > 0 ? beforeExpiry.totalBytes / beforeExpiry.liveRows : 0,
    claims,
    steadyClaimsPerSecond: mean(steady.map((s) => s.claimsPerSecond)),
    steadyReapedPerSecond: mean(steady.map((s) => s.reapedPerSecond)),
    bytesPerLiveRow: liveAtEnd > 0 ? sizeAtEnd / liveAtEnd : 0,
    walBytesPerClaim: wal.length > 0 ? mean(wal) : null,
    sizeGrowthSecondHalf: sizeAtHalf > 0 ? (sizeAtEnd - sizeAtHalf) / sizeAtHalf : 0,
    steadyMinBytes: Math.min(...steady.map((s) => s.totalBytes)),
    steadyMaxBytes: Math.max(...steady.map((s) => s.totalBytes)),
    steadyMaxDeadRows: Math.max(...steady.map((s) => s.deadRows)),
    steadyClaimP50Ms: median(steady.map((s) => s.claimP50Ms)),
    steadyClaimP99MedianMs: median(steady.map((s) => s.claimP99Ms)),
    steadyClaimP99MaxMs: Math.max(...steady.map((s) => s.claimP99Ms)),
    firstSteadyClaimP99Ms: steady[0]?.claimP99Ms ?? 0,
    lastClaimP99Ms: steady.at(-1)?.claimP99Ms ?? 0,
    finalTotalBytes: finalBytes,
  };
}
