import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import type { BenchServerConfig } from '../app/bench-server.js';
import { TEST_DATABASE_URL } from '../../test/support/servers/postgres.js';
import { mariadbUrl } from '../../test/support/servers/mariadb.js';
import type { Scenario } from './scenarios.js';
import type { BenchDriverMessage, BenchServerMessage, ProfileKind } from '../app/main.js';

/** A bench server process (bench/app/main.ts), forked with an IPC channel. */
export interface BenchServerProcess {
  readonly url: string;
  /** To tell the servers' CPU profiles (`--cpu-prof` writes CPU.<date>.<pid>...) apart. */
  readonly pid: number;
  /** Database statements the process has sent, and the CPU time it used, since it started. */
  counters(): Promise<ServerCounters>;
  /** Runs `during` with the server's CPU or heap (allocation) profiler on, and writes the profile to `path`. */
  profile<T>(kind: ProfileKind, path: string, during: () => Promise<T>): Promise<T>;
  stop(): Promise<void>;
}

/**
 * The server of `scenario` (its kind and Redis prefix), on the bench's database schema and Redis
 * (`durable-mariadb`: on the bench's MariaDB database, which it needs).
 */
export function startScenarioServer(
  mainJs: string,
  scenario: Scenario,
  schema: string,
  redisUrl: string,
  mariadbDatabase?: string,
): Promise<BenchServerProcess> {
  const mariadb = scenario.server === 'durable-mariadb';
  if (mariadb && mariadbDatabase === undefined) throw new Error(`${scenario.name} needs a MariaDB database`);
  return startBenchServer(mainJs, {
    kind: scenario.server,
    databaseUrl: mariadb ? mariadbUrl(mariadbDatabase!) : TEST_DATABASE_URL,
    schema: mariadb ? mariadbDatabase! : schema,
    redisUrl,
    redisPrefix: scenario.redisPrefix,
  });
}

/** Forks `mainJs` with the server's configuration and resolves once it listens. */
export async function startBenchServer(mainJs: string, config: BenchServerConfig): Promise<BenchServerProcess> {
  const child = fork(mainJs, [], {
    env: {
      PATH: process.env.PATH ?? '',
      NODE_ENV: 'production',
      BENCH_SERVER: config.kind,
      DATABASE_URL: config.databaseUrl,
      BENCH_SCHEMA: config.schema,
      REDIS_URL: config.redisUrl,
      BENCH_REDIS_PREFIX: config.redisPrefix,
    },
    // Node.js 24 when started by npm run bench / bench:profile (bench/build.mjs useBenchServerNode).
    execPath: process.env.BENCH_SERVER_NODE ?? process.execPath,
    execArgv: process.env.BENCH_SERVER_NODE_OPTIONS?.split(' ').filter(Boolean) ?? [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`bench server ${config.kind} did not listen within 60 s`)), 60_000);
    child.on('message', (message: BenchServerMessage) => {
      if (message.type !== 'listening') return;
      clearTimeout(timer);
      resolve(message.port);
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`bench server ${config.kind} exited with code ${code} before listening`));
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    counters: () => askCounters(child),
    profile: async (kind, path, during) => {
      await ask(child, { type: 'profile-start', kind }, 'profiling');
      const result = await during();
      await ask(child, { type: 'profile-stop', kind, path }, 'profiled');
      return result;
    },
    stop: () => stopChild(child),
  };
}

export interface ServerCounters {
  dbStatements: number;
  cpuMicros: number;
}

function ask(child: ChildProcess, request: BenchDriverMessage, answer: BenchServerMessage['type']): Promise<void> {
  return new Promise((resolve) => {
    const onMessage = (message: BenchServerMessage) => {
      if (message.type !== answer) return;
      child.off('message', onMessage);
      resolve();
    };
    child.on('message', onMessage);
    child.send(request);
  });
}

function askCounters(child: ChildProcess): Promise<ServerCounters> {
  return new Promise((resolve) => {
    const onMessage = (message: BenchServerMessage) => {
      if (message.type !== 'counters') return;
      child.off('message', onMessage);
      resolve({ dbStatements: message.dbStatements, cpuMicros: message.cpuMicros });
    };
    child.on('message', onMessage);
    child.send({ type: 'counters' });
  });
}

/** Closing the IPC channel makes the server close the app and exit; SIGKILL after 10 s. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.disconnect();
  const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(killer);
}
