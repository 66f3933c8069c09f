import { readFile } from 'node:fs/promises';
import { mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { createThrowawaySchema, dropSchema, TEST_DATABASE_URL } from '../../test/support/servers/postgres.js';
import { startRedisServer } from '../../test/support/servers/redis-server.js';
import { sleep } from '../../test/support/timing.js';
import { prepareBenchSchema } from './database.js';
import { runLoad, sendOnce } from './load.js';
import { type ScenarioName, SCENARIOS } from './scenarios.js';
import { startScenarioServer } from './servers.js';
import type { ProfileKind } from '../app/main.js';

export interface ProfileRunOptions {
  repoRoot: string;
  serverMainJs: string;
  argv: readonly string[];
}
import { type CpuProfile, type HeapProfile, summarizeAllocations, summarizeProfile } from './profile-summary.js';
import { bytesByPhase, cpuByPhase, phaseTable } from './request-phases.js';

/**
 * `npm run bench:profile -- <scenario>... [--seconds N] [--top N] [--repeat N] [--heap | --no-profiler]`:
 * runs each scenario's server alone under load, with V8's CPU profiler on during the measured run
 * only, and prints where its CPU went: server CPU µs per request, then the share of each package
 * (this library by file) and the hottest functions by self time. `--heap`: the sampling heap
 * profiler instead, counting what the garbage collector already took: bytes allocated per request,
 * by package and function (garbage collection is the largest single cost of a request).
 * `--phases`: instead of packages and functions, the work per request by phase of an idempotent
 * request (bench/driver/request-phases.ts), as Markdown rows for docs/performance.md.
 * `--no-profiler`: only req/s and CPU µs per request, `--repeat` times. Profiles are kept in `bench/results/profiles/` (open them in
 * Chrome DevTools). The profiler adds its own cost: compare shares, not µs, with `npm run bench`.
 */
export async function runProfile(options: ProfileRunOptions): Promise<void> {
  const names = options.argv.filter((arg) => !arg.startsWith('--') && !/^\d+$/.test(arg)) as ScenarioName[];
  const flag = (name: string, fallback: number) => {
    const at = options.argv.indexOf(name);
    return at >= 0 ? Number(options.argv[at + 1]) : fallback;
  };
  const seconds = flag('--seconds', 8);
  const top = flag('--top', 30);
  const repeat = flag('--repeat', 1);
  const profiling = !options.argv.includes('--no-profiler');
  const phases = options.argv.includes('--phases');
  const kind: ProfileKind = options.argv.includes('--heap') ? 'heap' : 'cpu';
  const scenarios = names.length ? names.map((name) => scenarioNamed(name)) : [scenarioNamed('fresh-redis')];
  const outDir = resolve(options.repoRoot, 'bench/results/profiles');
  await mkdir(outDir, { recursive: true });
  const schema = await createThrowawaySchema('bench');
  const redis = await startRedisServer({ args: ['--maxmemory-policy', 'noeviction'] });
  try {
    await prepareBenchSchema(TEST_DATABASE_URL, schema);
    for (const scenario of scenarios) {
      const server = await startScenarioServer(options.serverMainJs, scenario, schema, redis.url);
      try {
        const replayKey = `bench-replay-${randomUUID()}`;
        await sendOnce(server.url, scenario.keys === 'replay' ? replayKey : randomUUID());
        const load = { connections: 10, durationSeconds: seconds };
        await runLoad(server.url, scenario, replayKey, { ...load, durationSeconds: 3 });
        await sleep(300);
        for (let run = 1; run <= repeat; run++) {
          const path = join(outDir, `${scenario.name}.${kind === 'cpu' ? 'cpuprofile' : 'heapprofile'}`);
          const measured = () => runLoad(server.url, scenario, replayKey, load);
          const before = await server.counters();
          const result = profiling ? await server.profile(kind, path, measured) : await measured();
          const after = await server.counters();
          const cpuPerRequest = (after.cpuMicros - before.cpuMicros) / result.sent;
          console.log(
            `== ${scenario.name}: ${Math.round(result.rps)} req/s, ${Math.round(cpuPerRequest)} server CPU µs/req` +
              (profiling ? ` (profiler on), ${path}` : ''),
          );
          if (!profiling) continue;
          const profile: unknown = JSON.parse(await readFile(path, 'utf8'));
          if (phases) {
            console.log(
              kind === 'cpu'
                ? phaseTable(
                    `${scenario.name}, CPU by phase (profiler on)`,
                    cpuByPhase(profile as CpuProfile, result.sent),
                    'µs',
                    1,
                  )
                : phaseTable(
                    `${scenario.name}, allocations by phase`,
                    bytesByPhase(profile as HeapProfile, result.sent),
                    'bytes',
                    0,
                  ),
            );
            continue;
          }
          console.log(
            kind === 'cpu'
              ? summarizeProfile(profile as CpuProfile, result.sent, top)
              : summarizeAllocations(profile as HeapProfile, result.sent, top),
          );
        }
      } finally {
        await server.stop();
      }
    }
  } finally {
    await redis.stop();
    await dropSchema(schema);
  }
}

function scenarioNamed(name: string) {
  const scenario = SCENARIOS.find((candidate) => candidate.name === name);
  if (!scenario) throw new Error(`unknown scenario ${name}: one of ${SCENARIOS.map((s) => s.name).join(', ')}`);
  return scenario;
}
