import { mkdir, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { createThrowawaySchema, dropSchema, TEST_DATABASE_URL } from '../../test/support/servers/postgres.js';
import { openRedis } from '../../test/support/servers/redis.js';
import { startRedisServer } from '../../test/support/servers/redis-server.js';
import { sleep } from '../../test/support/timing.js';
import { createMariadbDatabase, dropMariadbDatabase } from '../../test/support/servers/mariadb.js';
import { prepareBenchMariadb, prepareBenchSchema, truncateBenchMariadb, truncateOrders } from './database.js';
import { type LoadOptions, runLoad, sendOnce } from './load.js';
import { commandCalls, medianBytesPerKey, redisCostBetween } from './redis-stats.js';
import { formatSummary, type Measurements, type Sample, summarize } from './report.js';
import { rotation, type ScenarioName, SCENARIOS } from './scenarios.js';
import { type BenchServerProcess, startScenarioServer } from './servers.js';

export interface BenchRunOptions {
  repoRoot: string;
  /** The compiled bench server (bench/app/main.ts). */
  serverMainJs: string;
  argv: readonly string[];
}

/** Requests cut off when a run stops still finish their server-side work: wait for it before counting. */
const SETTLE_MS = 300;

function settingsFrom(argv: readonly string[]): Measurements['settings'] {
  const quick = argv.includes('--quick');
  const valueOf = (flag: string, fallback: number) => {
    const at = argv.indexOf(flag);
    const value = at >= 0 ? Number(argv[at + 1]) : fallback;
    if (!Number.isFinite(value) || value <= 0) throw new Error(`${flag} needs a positive number`);
    return value;
  };
  return {
    quick,
    rounds: valueOf('--rounds', quick ? 3 : 5),
    warmupSeconds: valueOf('--warmup', quick ? 1 : 3),
    durationSeconds: valueOf('--duration', quick ? 3 : 10),
    connections: valueOf('--connections', 10),
  };
}

/**
 * `npm run bench [-- --quick]`: starts a throwaway redis-server and schema, one server process
 * per scenario, then runs every scenario once per round (warm-up, then measurement) in a
 * rotating order, and reports medians and same-round ratios (bench/README.md).
 */
export async function runBench(options: BenchRunOptions): Promise<void> {
  const settings = settingsFrom(options.argv);
  const loadBefore = loadavg()[0]!;
  const schema = await createThrowawaySchema('bench');
  const mariadb = await createMariadbDatabase('bench');
  const redis = await startRedisServer({ args: ['--maxmemory-policy', 'noeviction'] });
  const stats = await openRedis(redis.url);
  const servers = new Map<ScenarioName, BenchServerProcess>();
  try {
    await prepareBenchSchema(TEST_DATABASE_URL, schema);
    await prepareBenchMariadb(mariadb);
    await Promise.all(
      SCENARIOS.map(async (scenario) => {
        const server = await startScenarioServer(options.serverMainJs, scenario, schema, redis.url, mariadb);
        servers.set(scenario.name, server);
      }),
    );
    console.log(`servers: ${SCENARIOS.map(({ name }) => `${name} (pid ${servers.get(name)!.pid})`).join(', ')}`);
    const replayKey = `bench-replay-${randomUUID()}`;
    let responseBodyBytes = 0;
    for (const scenario of SCENARIOS) {
      const first = await sendOnce(
        servers.get(scenario.name)!.url,
        scenario.keys === 'replay' ? replayKey : randomUUID(),
      );
      if (first.status !== 201)
        throw new Error(`${scenario.name}: the first request answered ${first.status}, expected 201`);
      responseBodyBytes = first.bodyBytes;
    }
    const load = (durationSeconds: number): LoadOptions => ({ connections: settings.connections, durationSeconds });
    const rounds: Map<ScenarioName, Sample>[] = [];
    for (let round = 0; round < settings.rounds; round++) {
      await truncateOrders(TEST_DATABASE_URL, schema);
      await truncateBenchMariadb(mariadb);
      const samples = new Map<ScenarioName, Sample>();
      for (const scenario of rotation(SCENARIOS, round)) {
        const server = servers.get(scenario.name)!;
        await runLoad(server.url, scenario, replayKey, load(settings.warmupSeconds));
        await sleep(SETTLE_MS);
        const [callsBefore, before] = await Promise.all([commandCalls(stats), server.counters()]);
        const result = await runLoad(server.url, scenario, replayKey, load(settings.durationSeconds));
        await sleep(SETTLE_MS);
        const [callsAfter, after] = await Promise.all([commandCalls(stats), server.counters()]);
        const redisCost = redisCostBetween(callsBefore, callsAfter);
        samples.set(scenario.name, {
          rps: result.rps,
          p50Ms: result.p50Ms,
          p99Ms: result.p99Ms,
          failures: result.failures,
          redisClientCommandsPerRequest: redisCost.clientCommands / result.sent,
          redisExecutedCommandsPerRequest: redisCost.executedCommands / result.sent,
          dbStatementsPerRequest: (after.dbStatements - before.dbStatements) / result.sent,
          serverCpuMicrosPerRequest: (after.cpuMicros - before.cpuMicros) / result.sent,
        });
        console.log(
          `round ${round + 1}/${settings.rounds} ${scenario.name.padEnd(15)} ${Math.round(result.rps)} req/s, ` +
            `p50 ${result.p50Ms} ms, p99 ${result.p99Ms} ms${result.failures ? `, ${result.failures} failed` : ''}`,
        );
      }
      rounds.push(samples);
    }
    const summary = summarize({
      rounds,
      redisBytesPerRecord: await medianBytesPerKey(stats, SCENARIOS.find((s) => s.name === 'fresh-redis')!.redisPrefix),
      peerRedisBytesPerRecord: await medianBytesPerKey(
        stats,
        SCENARIOS.find((s) => s.name === 'peer-fresh')!.redisPrefix,
      ),
      responseBodyBytes,
      settings,
      loadBefore,
    });
    console.log(`\n${formatSummary(summary)}`);
    const resultsDir = join(options.repoRoot, 'bench/results');
    await mkdir(resultsDir, { recursive: true });
    await writeFile(join(resultsDir, 'latest.json'), `${JSON.stringify(summary, null, 2)}\n`);
    console.log(`\nwrote ${join('bench/results', 'latest.json')}`);
  } finally {
    await Promise.all([...servers.values()].map((server) => server.stop()));
    await stats.quit();
    await redis.stop();
    await dropSchema(schema);
    await dropMariadbDatabase(mariadb);
  }
}
