import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster } from 'ioredis';
import { REDIS_FAIL_FAST_OPTIONS } from 'nestjs-idempotency/redis';
import { freePortWithCompanion } from '../net/free-port.js';

/** A cluster node's bus listens this far above its port (Redis' fixed offset). */
const CLUSTER_BUS_OFFSET = 10_000;
import { waitUntil } from '../timing.js';
import { askNode, startRedisServer, type ThrowawayRedis } from './redis-server.js';

/**
 * Throwaway Redis Clusters of redis-servers on spare ports: started, joined and settled, a
 * client on them, and waiting for replicas. Reshaping a running cluster is in
 * `redis-cluster-reshape.ts`.
 */

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

/**
 * Starts `masters × (1 + replicasPerMaster)` redis-servers with `--cluster-enabled yes` on spare
 * ports, joins them with `redis-cli --cluster create ... --cluster-replicas <n> --cluster-yes`,
 * and waits until every node reports `cluster_state:ok` and knows every other node, and every
 * replica's link to its master is up.
 */
export async function startRedisCluster(
  masters = 3,
  options: RedisClusterOptions = {},
): Promise<ThrowawayRedisCluster> {
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
      const args = [
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `nodes-${port}.conf`,
        '--cluster-node-timeout',
        '2000',
      ];
      servers.set(port, await startRedisServer({ port, args, dir }));
    };
    const restart = async (port: number): Promise<void> => {
      await servers.get(port)?.stop();
      await launchNode(port);
    };
    for (let i = 0; i < masters * (1 + replicas); i++)
      await launchNode(await freePortWithCompanion(CLUSTER_BUS_OFFSET));
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
          const known = String(await askNode(port, 'CLUSTER', 'NODES'))
            .trim()
            .split('\n');
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
