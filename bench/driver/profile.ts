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

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

interface HeapProfileNode {
  callFrame: ProfileNode['callFrame'];
  selfSize: number;
  children: HeapProfileNode[];
}
interface HeapProfile {
  head: HeapProfileNode;
}

/** Time the V8 profiler books on nothing the process did for a request. */
const NOT_WORK = new Set(['(idle)', '(program)']);

/**
 * `npm run bench:profile -- <scenario>... [--seconds N] [--top N] [--repeat N] [--heap | --no-profiler]`:
 * runs each scenario's server alone under load, with V8's CPU profiler on during the measured run
 * only, and prints where its CPU went: server CPU µs per request, then the share of each package
 * (this library by file) and the hottest functions by self time. `--heap`: the sampling heap
 * profiler instead, counting what the garbage collector already took: bytes allocated per request,
 * by package and function (garbage collection is the largest single cost of a request).
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

/** Where a function lives: this library's file, a package, or Node's internals. */
function ownerOf(url: string): string {
  if (!url) return '(native)';
  const library = /libs\/idempotency\/(?:dist|src)\/(.+)$/.exec(url);
  if (library) return `nestjs-idempotency/${library[1]}`;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\/(?!.*node_modules)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url;
  return url.split('/').slice(-2).join('/');
}

/** Self time per owner and per function, in µs per request, over the profile's working samples. */
export function summarizeProfile(profile: CpuProfile, requests: number, top: number): string {
  const selfMicros = new Map<number, number>();
  profile.samples.forEach((id, index) =>
    selfMicros.set(id, (selfMicros.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0)),
  );
  const byOwner = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let work = 0;
  for (const node of profile.nodes) {
    const micros = selfMicros.get(node.id) ?? 0;
    const { functionName, url, lineNumber } = node.callFrame;
    if (micros === 0 || NOT_WORK.has(functionName)) continue;
    work += micros;
    const owner = functionName === '(garbage collector)' ? '(garbage collector)' : ownerOf(url);
    byOwner.set(owner, (byOwner.get(owner) ?? 0) + micros);
    const fn = `${functionName || '(anonymous)'}  ${owner}:${lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + micros);
  }
  const table = (title: string, rows: Map<string, number>) =>
    ranked(title, rows, top, (micros) => `${(micros / requests).toFixed(1).padStart(7)} µs  ${percent(micros, work)}`);
  return [
    `profiled work: ${(work / requests).toFixed(0)} µs/req`,
    table('-- self time by package / library file', byOwner),
    table('-- self time by function', byFunction),
  ].join('\n');
}

/** Bytes allocated per request, by owner and by function (the sampling heap profile's self sizes). */
export function summarizeAllocations(profile: HeapProfile, requests: number, top: number): string {
  const byOwner = new Map<string, number>();
  const byFunction = new Map<string, number>();
  let total = 0;
  const visit = (node: HeapProfileNode) => {
    const { functionName, url, lineNumber } = node.callFrame;
    if (node.selfSize > 0) {
      total += node.selfSize;
      const owner = ownerOf(url);
      byOwner.set(owner, (byOwner.get(owner) ?? 0) + node.selfSize);
      const fn = `${functionName || '(anonymous)'}  ${owner}:${lineNumber + 1}`;
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + node.selfSize);
    }
    for (const child of node.children) visit(child);
  };
  visit(profile.head);
  const table = (title: string, rows: Map<string, number>) =>
    ranked(
      title,
      rows,
      top,
      (bytes) =>
        `${Math.round(bytes / requests)
          .toString()
          .padStart(7)} B  ${percent(bytes, total)}`,
    );
  return [
    `allocated: ${Math.round(total / requests)} bytes/req`,
    table('-- allocated by package / library file', byOwner),
    table('-- allocated by function', byFunction),
  ].join('\n');
}

/** `title`, then the `top` rows by value, largest first, each as `format(value)` and its name. */
function ranked(title: string, rows: Map<string, number>, top: number, format: (value: number) => string): string {
  const lines = [...rows]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([name, value]) => `${format(value)}  ${name}`);
  return [title, ...lines].join('\n');
}

function percent(part: number, whole: number): string {
  return `${((100 * part) / whole).toFixed(1).padStart(5)} %`;
}
