import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { REDIS_FAIL_FAST_OPTIONS } from 'nestjs-idempotency/redis';

/**
 * Redis for the e2e suites: the shared server at `REDIS_URL` (default `redis://127.0.0.1:6379`),
 * used by several suites at once (work under a prefix of your own, never FLUSHALL), and
 * throwaway servers on spare loopback ports for tests that stop or kill Redis.
 */
export function redisUrl(): string {
  return process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
}

/** Where a URL points, without credentials. */
function where(url: string): string {
  try {
    const { hostname, port } = new URL(url);
    return `${hostname}:${port || 6379}`;
  } catch {
    return 'REDIS_URL (unparseable)';
  }
}

/**
 * A connected client (the caller closes it with `quit()`), or an error that names the server
 * and how to start it. Commands fail fast: no retries, 2 s timeouts.
 */
export async function openRedis(url: string = redisUrl(), options: RedisOptions = {}): Promise<Redis> {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 2_000,
    commandTimeout: 2_000,
    maxRetriesPerRequest: 0,
    retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
    ...options,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.ping();
    return client;
  } catch (error) {
    client.disconnect();
    throw new Error(
      `Redis not reachable at ${where(url)}: start it (see README, "Running the tests": ` +
        '`docker compose up -d redis`, or `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" ' +
        `--appendonly no\`). Cause: ${(error as Error).message}`,
    );
  }
}

/**
 * Fails loudly, naming the server and how to start it, when Redis does not answer a PING.
 * Leaves no connection open.
 */
export async function connectRedisOrFail(url: string = redisUrl()): Promise<void> {
  const client = await openRedis(url);
  await client.quit();
}

/** Deletes every key that starts with `prefix` (SCAN, never KEYS or FLUSHALL). */
export async function deleteKeys(client: Redis, prefix: string): Promise<number> {
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`, 'COUNT', 1000);
    if (keys.length > 0) deleted += await client.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  return deleted;
}

/** A throwaway redis-server (no persistence) on a spare loopback port. */
export interface ThrowawayRedis {
  readonly port: number;
  readonly url: string;
  /** Shuts the server down (SIGTERM) and waits until the process has exited. */
  stop(): Promise<void>;
  /** Kills the server at once (SIGKILL), as a crash would; does not wait. */
  kill(): void;
}

/** A TCP port on 127.0.0.1 that nothing listened on a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('could not pick a free port');
  return address.port;
}

/** True when something on `port` answers PING with +PONG. */
function answersPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

async function launch(
  port: number,
  extraArgs: readonly string[],
  dir: string,
  configFile?: string,
): Promise<{ child: ChildProcess; output: () => string }> {
  const child = spawn(
    'redis-server',
    [
      ...(configFile ? [configFile] : []),
      ...['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extraArgs],
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const keep = (chunk: Buffer): void => {
    output = (output + chunk.toString()).slice(-4_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<'exited'>((resolve) => child.once('exit', () => resolve('exited')));
  const failed = new Promise<never>((_, reject) =>
    child.once('error', (error) =>
      reject(new Error(`could not start redis-server (${error.message}): is it installed and on PATH?`)),
    ),
  );
  failed.catch(() => undefined);
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    const winner = await Promise.race([answersPing(port).then((ok) => (ok ? 'up' : 'down')), exited, failed]);
    if (winner === 'up') return { child, output: () => output };
    if (winner === 'exited') throw Object.assign(new Error(`redis-server exited: ${output.trim()}`), { exited: true });
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  child.kill('SIGKILL');
  throw new Error(`redis-server on port ${port} did not answer within 5 s: ${output.trim()}`);
}

/**
 * Starts `redis-server --port <spare port> --bind 127.0.0.1 --save "" --appendonly no` and waits
 * until it answers PING. Retries on another port when the chosen one was taken in between;
 * `port` asks for a given port (to bring a killed server back); `configFile` goes first on the
 * command line (Sentinel needs one it can rewrite). The caller stops it; a server still running
 * when the test process exits is killed.
 */
export async function startRedisServer(
  options: { port?: number; args?: readonly string[]; dir?: string; configFile?: string } = {},
): Promise<ThrowawayRedis> {
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort());
    try {
      const { child } = await launch(port, options.args ?? [], options.dir ?? tmpdir(), options.configFile);
      const killAtExit = (): void => {
        child.kill('SIGKILL');
      };
      process.once('exit', killAtExit);
      const exited = new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) resolve();
        else child.once('exit', () => resolve());
      });
      void exited.then(() => process.removeListener('exit', killAtExit));
      return {
        port,
        url: `redis://127.0.0.1:${port}`,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          await exited;
        },
        kill() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        },
      };
    } catch (error) {
      if (options.port !== undefined || attempt >= 3 || !(error as { exited?: boolean }).exited) throw error;
    }
  }
}

/** A throwaway Redis Cluster: every slot assigned, `cluster_state:ok`, replicas in sync. */
export interface ThrowawayRedisCluster {
  /** Every node (masters first, then replicas), as ioredis `Cluster` startup nodes. */
  readonly nodes: readonly { host: string; port: number }[];
  /** The node processes by port, to stop or kill one (a crash, a failover). */
  readonly servers: ReadonlyMap<number, ThrowawayRedis>;
  /**
   * Starts the node on `port` again after a stop or a crash: same port, same cluster config
   * file, so it rejoins with its id and slots (and without its data: nothing is persisted).
   */
  restart(port: number): Promise<void>;
  /** Stops every node and removes their cluster config files. */
  stop(): Promise<void>;
}

/** Options of {@link startRedisCluster}. */
export interface RedisClusterOptions {
  /** Replicas per master; a master needs one to fail over. @default 0 */
  replicasPerMaster?: number;
  /** How long the nodes and the cluster have to come up, in ms. @default 30_000 */
  timeoutMs?: number;
}

/** Polls `check` every 50 ms until it holds, or throws `what` after `timeoutMs`. */
export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The answer of one command to the node on `port` (a short-lived connection). */
export async function askNode(port: number, ...args: (string | number)[]): Promise<unknown> {
  const client = await openRedis(`redis://127.0.0.1:${port}`, { commandTimeout: 10_000 });
  try {
    return await client.call(String(args[0]), ...args.slice(1));
  } finally {
    client.disconnect();
  }
}

/**
 * Starts `masters × (1 + replicasPerMaster)` redis-servers with `--cluster-enabled yes` on spare
 * ports, joins them with `redis-cli --cluster create ... --cluster-replicas <n> --cluster-yes`,
 * and waits until every node reports `cluster_state:ok` and knows every other node, and every
 * replica's link to its master is up.
 */
export async function startRedisCluster(masters = 3, options: RedisClusterOptions = {}): Promise<ThrowawayRedisCluster> {
  const replicas = options.replicasPerMaster ?? 0;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const dir = await mkdtemp(join(tmpdir(), 'idem-cluster-'));
  const servers = new Map<number, ThrowawayRedis>();
  const stop = async (): Promise<void> => {
    await Promise.all([...servers.values()].map((server) => server.stop()));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const launchNode = async (port: number): Promise<void> => {
      const args = ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '2000'];
      servers.set(port, await startRedisServer({ port, args, dir }));
    };
    const restart = async (port: number): Promise<void> => {
      await servers.get(port)?.stop();
      await launchNode(port);
    };
    for (let i = 0; i < masters * (1 + replicas); i++) await launchNode(await freePort());
    const ports = [...servers.keys()];
    const addresses = ports.map((port) => `127.0.0.1:${port}`);
    await promisify(execFile)(
      'redis-cli',
      ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicas), '--cluster-yes'],
      { timeout: timeoutMs },
    );
    const deadline = Date.now() + timeoutMs;
    for (const port of ports) {
      await waitUntil(
        async () => {
          const info = String(await askNode(port, 'CLUSTER', 'INFO'));
          const known = String(await askNode(port, 'CLUSTER', 'NODES')).trim().split('\n');
          const settled = known.length === ports.length && known.every((line) => !/handshake|noaddr|fail/.test(line));
          const replication = String(await askNode(port, 'INFO', 'replication'));
          const linked = !replication.includes('role:slave') || replication.includes('master_link_status:up');
          return info.includes('cluster_state:ok') && settled && linked;
        },
        Math.max(deadline - Date.now(), 0),
        `Redis Cluster node 127.0.0.1:${port} is ok, knows all ${ports.length} nodes and is in sync`,
      );
    }
    return { nodes: ports.map((port) => ({ host: '127.0.0.1', port })), servers, restart, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * An ioredis `Cluster` client on a throwaway cluster, configured as the README recommends: the
 * store's fail-fast options on every node connection, and no cluster-level offline queue (it
 * has no timeout: while the cluster is down, queued commands would wait for ever). One
 * deviation: a 10 s command timeout, because on a loaded test machine a claim whose reply takes
 * over 2 s fails with 503 after Redis applied it, and its orphaned claim turns every duplicate
 * into a 409 until the lease ends. Suites that test timeouts use their own clients. Resolves
 * once the client is ready; the caller disconnects it.
 */
export async function openRedisCluster(cluster: ThrowawayRedisCluster): Promise<Cluster> {
  const client = new Cluster([...cluster.nodes], {
    redisOptions: { ...REDIS_FAIL_FAST_OPTIONS, commandTimeout: 10_000 },
    enableOfflineQueue: false,
  });
  client.on('error', () => undefined);
  await waitUntil(async () => client.status === 'ready', 15_000, 'the Cluster client is ready');
  return client;
}

/** Waits until the replicas of the master on `masterPort` have every write it has acknowledged. */
export async function waitForReplicas(masterPort: number): Promise<void> {
  const offsetOf = (info: string, field: RegExp): number => Number(field.exec(info)?.[1] ?? -1);
  const target = offsetOf(String(await askNode(masterPort, 'INFO', 'replication')), /master_repl_offset:(\d+)/);
  await waitUntil(
    async () => {
      const info = String(await askNode(masterPort, 'INFO', 'replication'));
      const replicas = [...info.matchAll(/^slave\d+:.*offset=(\d+)/gm)].map((match) => Number(match[1]));
      return replicas.length > 0 && replicas.every((offset) => offset >= target);
    },
    15_000,
    `the replicas of 127.0.0.1:${masterPort} reached offset ${target}`,
  );
}
