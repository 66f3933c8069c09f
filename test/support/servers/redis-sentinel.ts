import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { askNode, startRedisServer, type ThrowawayRedis } from './redis-server.js';
import { freePort } from '../net/free-port.js';
import { waitUntil } from '../timing.js';

/** A throwaway Sentinel setup: one master, one replica, one Sentinel (quorum 1). */
export interface ThrowawayRedisSentinel {
  /** The master name the Sentinel monitors (ioredis `name`). */
  readonly name: string;
  /** Where the Sentinel listens (ioredis `sentinels`). */
  readonly sentinels: readonly { host: string; port: number }[];
  /** The port of the master the Sentinel names now. */
  masterPort(): Promise<number>;
  /**
   * `SENTINEL FAILOVER <name>`: promotes the replica, and resolves with its port once the
   * Sentinel names it (`+switch-master`). The Sentinel turns the old master into a replica
   * some seconds later.
   */
  failOver(): Promise<number>;
  /** Stops the three servers and removes their files. */
  stop(): Promise<void>;
}

/**
 * Starts a master, a replica of it (`--replicaof`) and a Sentinel (`redis-server <conf>
 * --sentinel`) on spare loopback ports, and waits until the replica is in sync and the Sentinel
 * knows it (a failover needs a replica the Sentinel has seen).
 */
export async function startRedisSentinel(name = 'idem-master'): Promise<ThrowawayRedisSentinel> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-sentinel-'));
  const servers: ThrowawayRedis[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(servers.map((server) => server.stop()));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const master = await startRedisServer({ dir });
    servers.push(master);
    const replica = await startRedisServer({ dir, args: ['--replicaof', '127.0.0.1', String(master.port)] });
    servers.push(replica);
    await waitUntil(
      async () => String(await askNode(replica.port, 'INFO', 'replication')).includes('master_link_status:up'),
      15_000,
      'the replica is in sync with the master',
    );

    const configFile = join(dir, 'sentinel.conf');
    await writeFile(
      configFile,
      [
        `sentinel monitor ${name} 127.0.0.1 ${master.port} 1`,
        `sentinel down-after-milliseconds ${name} 2000`,
        `sentinel failover-timeout ${name} 10000`,
        '',
      ].join('\n'),
    );
    const sentinel = await startRedisServer({ port: await freePort(), dir, configFile, args: ['--sentinel'] });
    servers.push(sentinel);
    await waitUntil(
      async () => {
        const replicas = (await askNode(sentinel.port, 'SENTINEL', 'REPLICAS', name)) as string[][];
        return replicas.some((fields) => fields.includes(String(replica.port)) && !fields.join(' ').includes('s_down'));
      },
      15_000,
      `the Sentinel knows the replica of ${name}`,
    );

    const masterPort = async (): Promise<number> => {
      const [, port] = (await askNode(sentinel.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as [string, string];
      return Number(port);
    };
    return {
      name,
      sentinels: [{ host: '127.0.0.1', port: sentinel.port }],
      masterPort,
      async failOver() {
        const before = await masterPort();
        const after = before === master.port ? replica.port : master.port;
        // NOGOODSLAVE until the Sentinel has fresh INFO from the replica: ask again.
        await waitUntil(
          async () => (await askNode(sentinel.port, 'SENTINEL', 'FAILOVER', name).catch(() => 'refused')) === 'OK',
          15_000,
          `the Sentinel accepts a failover of ${name}`,
        );

        await waitUntil(
          async () =>
            (await masterPort()) === after &&
            String(await askNode(after, 'INFO', 'replication')).includes('role:master'),
          30_000,
          `the Sentinel names 127.0.0.1:${after} the master of ${name}`,
        );
        return after;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
