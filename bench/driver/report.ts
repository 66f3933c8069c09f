import { loadavg } from 'node:os';
import { median } from './redis-stats.js';
import { FRESH_REDIS_CPU_OVER_PLAIN_TARGET, RATIOS, type ScenarioName, SCENARIOS } from './scenarios.js';

/** One scenario's measurement in one round. */
export interface Sample {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  failures: number;
  redisClientCommandsPerRequest: number;
  redisExecutedCommandsPerRequest: number;
  dbStatementsPerRequest: number;
  dbRoundTripsPerRequest: number;
  /** CPU time (user + system) the server process used per request: steadier than req/s on a busy machine. */
  serverCpuMicrosPerRequest: number;
}

/** Everything the run measured: samples per round, and the memory figures taken at the end. */
export interface Measurements {
  rounds: Map<ScenarioName, Sample>[];
  redisBytesPerRecord?: number;
  peerRedisBytesPerRecord?: number;
  responseBodyBytes: number;
  settings: { quick: boolean; rounds: number; warmupSeconds: number; durationSeconds: number; connections: number };
  /** 1-minute load averages before and after the run (other work on the machine skews the numbers). */
  loadBefore: number;
}

interface ScenarioSummary {
  name: ScenarioName;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  failures: number;
  redisCommandsPerRequest: number;
  redisExecutedCommandsPerRequest: number;
  dbStatementsPerRequest: number;
  dbRoundTripsPerRequest: number;
  serverCpuMicrosPerRequest: number;
  /** Server CPU per request above `plain`'s, in µs: what the layer (or the transaction) costs. */
  cpuOverPlainMicrosPerRequest: number;
}

interface RatioSummary {
  name: string;
  /** Median of the same-round ratios. */
  median: number;
  perRound: number[];
  target?: number;
  met?: boolean;
}

const round2 = (value: number) => Math.round(value * 100) / 100;

/** Medians over rounds per scenario, and each ratio as the median of its same-round ratios. */
export function summarize(measurements: Measurements) {
  const of = (name: ScenarioName, pick: (sample: Sample) => number) =>
    median(measurements.rounds.map((round) => pick(round.get(name)!)));
  const plainCpu = of('plain', (s) => s.serverCpuMicrosPerRequest);
  const scenarios: ScenarioSummary[] = SCENARIOS.map(({ name }) => ({
    name,
    rps: Math.round(of(name, (s) => s.rps)),
    p50Ms: of(name, (s) => s.p50Ms),
    p99Ms: of(name, (s) => s.p99Ms),
    failures: measurements.rounds.reduce((sum, round) => sum + round.get(name)!.failures, 0),
    redisCommandsPerRequest: round2(of(name, (s) => s.redisClientCommandsPerRequest)),
    redisExecutedCommandsPerRequest: round2(of(name, (s) => s.redisExecutedCommandsPerRequest)),
    dbStatementsPerRequest: round2(of(name, (s) => s.dbStatementsPerRequest)),
    dbRoundTripsPerRequest: round2(of(name, (s) => s.dbRoundTripsPerRequest)),
    serverCpuMicrosPerRequest: Math.round(of(name, (s) => s.serverCpuMicrosPerRequest)),
    cpuOverPlainMicrosPerRequest: Math.round(of(name, (s) => s.serverCpuMicrosPerRequest) - plainCpu),
  }));
  const ratios: RatioSummary[] = RATIOS.map(({ numerator, denominator, target }) => {
    const perRound = measurements.rounds.map((round) =>
      round2(round.get(numerator)!.rps / round.get(denominator)!.rps),
    );
    const value = round2(median(perRound));
    return {
      name: `${numerator} / ${denominator}`,
      median: value,
      perRound,
      target,
      met: target === undefined ? undefined : value >= target,
    };
  });
  const byName = new Map(scenarios.map((s) => [s.name, s]));
  return {
    generatedAt: new Date().toISOString(),
    settings: measurements.settings,
    machine: { loadAverage1mBefore: round2(measurements.loadBefore), loadAverage1mAfter: round2(loadavg()[0]!) },
    scenarios: scenarios.map(
      ({ name, rps, p50Ms, p99Ms, serverCpuMicrosPerRequest, cpuOverPlainMicrosPerRequest }) => ({
        name,
        rps,
        p50Ms,
        p99Ms,
        serverCpuMicrosPerRequest,
        cpuOverPlainMicrosPerRequest,
      }),
    ),
    redisCommandsPerRequest: {
      fresh: byName.get('fresh-redis')!.redisCommandsPerRequest,
      replay: byName.get('replay-redis')!.redisCommandsPerRequest,
      freshExecutedInRedis: byName.get('fresh-redis')!.redisExecutedCommandsPerRequest,
    },
    redisBytesPerRecord: measurements.redisBytesPerRecord,
    dbStatementsPerRequest: {
      plain: byName.get('plain')!.dbStatementsPerRequest,
      'plain-tx': byName.get('plain-tx')!.dbStatementsPerRequest,
      'fresh-durable': byName.get('fresh-durable')!.dbStatementsPerRequest,
      'fresh-durable-mariadb': byName.get('fresh-durable-mariadb')!.dbStatementsPerRequest,
    },
    dbRoundTripsPerRequest: {
      plain: byName.get('plain')!.dbRoundTripsPerRequest,
      'plain-tx': byName.get('plain-tx')!.dbRoundTripsPerRequest,
      'fresh-durable': byName.get('fresh-durable')!.dbRoundTripsPerRequest,
    },
    ratios,
    details: {
      responseBodyBytes: measurements.responseBodyBytes,
      peerRedisBytesPerRecord: measurements.peerRedisBytesPerRecord,
      scenarios,
    },
  };
}

export type Summary = ReturnType<typeof summarize>;

/** The table and the ratios, as printed at the end of a run. */
export function formatSummary(summary: Summary): string {
  const header = [
    'scenario',
    'req/s',
    'p50 ms',
    'p99 ms',
    'Redis cmds/req',
    '(run in Redis)',
    'DB stmts/req',
    'DB trips/req',
    'server CPU µs/req',
    'µs over plain',
    'failed',
  ];
  const rows = summary.details.scenarios.map((s) => [
    s.name,
    String(s.rps),
    s.p50Ms.toFixed(1),
    s.p99Ms.toFixed(1),
    s.redisCommandsPerRequest.toFixed(2),
    s.redisExecutedCommandsPerRequest.toFixed(2),
    s.dbStatementsPerRequest.toFixed(2),
    s.dbRoundTripsPerRequest.toFixed(2),
    String(s.serverCpuMicrosPerRequest),
    String(s.cpuOverPlainMicrosPerRequest),
    String(s.failures),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    `| ${cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join(' | ')} |`;
  const out = [
    line(header),
    `|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`,
    ...rows.map(line),
    '',
  ];
  const freshOverPlain = summary.details.scenarios.find((s) => s.name === 'fresh-redis')?.cpuOverPlainMicrosPerRequest;
  if (freshOverPlain !== undefined) {
    const met = freshOverPlain <= FRESH_REDIS_CPU_OVER_PLAIN_TARGET;
    out.push(
      `fresh-redis server CPU over plain: ${freshOverPlain} µs/req target <= ${FRESH_REDIS_CPU_OVER_PLAIN_TARGET}: ${met ? 'met' : 'MISSED'}`,
      '',
    );
  }
  out.push('Ratios (median of the same-round ratios):');
  for (const ratio of summary.ratios) {
    const verdict =
      ratio.target === undefined ? '' : ` target >= ${ratio.target.toFixed(2)}: ${ratio.met ? 'met' : 'MISSED'}`;
    out.push(
      `  ${ratio.name.padEnd(30)} ${ratio.median.toFixed(2)}  (rounds: ${ratio.perRound.map((r) => r.toFixed(2)).join(', ')})${verdict}`,
    );
  }
  out.push('');
  out.push(
    `Redis memory per completed record: ${summary.redisBytesPerRecord ?? '?'} bytes (peer: ${summary.details.peerRedisBytesPerRecord ?? '?'}), response body ${summary.details.responseBodyBytes} bytes`,
  );
  out.push(
    `Load average (1 min) before / after: ${summary.machine.loadAverage1mBefore} / ${summary.machine.loadAverage1mAfter} on ${summary.settings.connections} connections`,
  );
  return out.join('\n');
}

interface RunOnNode {
  version: string;
  summary: Summary;
}

/** `npm run bench -- --beside-node <v>`: CPU per request and the ratios of two runs, one column per Node.js version. */
export function formatBeside(primary: RunOnNode, other: RunOnNode): string {
  const runs = [primary, other];
  const scenario = (run: RunOnNode, name: string) => run.summary.details.scenarios.find((s) => s.name === name);
  const out = [
    `| server CPU µs/req (over plain) | ${runs.map((run) => `Node.js ${run.version}`).join(' | ')} |`,
    `|---|${runs.map(() => '---:').join('|')}|`,
  ];
  for (const { name } of primary.summary.details.scenarios) {
    const cells = runs.map((run) => {
      const s = scenario(run, name);
      return s
        ? `${s.serverCpuMicrosPerRequest} (${s.cpuOverPlainMicrosPerRequest >= 0 ? '+' : ''}${s.cpuOverPlainMicrosPerRequest})`
        : '?';
    });
    out.push(`| \`${name}\` | ${cells.join(' | ')} |`);
  }
  out.push(
    '',
    `| ratio | ${runs.map((run) => `Node.js ${run.version}`).join(' | ')} |`,
    `|---|${runs.map(() => '---:').join('|')}|`,
  );
  for (const { name } of primary.summary.ratios) {
    const cells = runs.map((run) => run.summary.ratios.find((r) => r.name === name)?.median.toFixed(2) ?? '?');
    out.push(`| \`${name}\` | ${cells.join(' | ')} |`);
  }
  return out.join('\n');
}
