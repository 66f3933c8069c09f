import { askNode } from './redis-server.js';
import { waitUntil } from '../timing.js';

/**
 * Reshaping a running throwaway Redis Cluster (see `startRedisCluster`) the way an operator
 * does: moving a slot to another master, and failing a master over to its replica. Each step
 * waits until the nodes agree, never for a fixed time.
 */

/** One line of `CLUSTER NODES`, as one node sees it. */
export interface ClusterNodeView {
  readonly id: string;
  readonly port: number;
  readonly role: 'master' | 'replica';
  /** The master's id, for a replica. */
  readonly masterId?: string;
  /** `fail`, `fail?`, `handshake`, `noaddr`... (empty when healthy). */
  readonly trouble: readonly string[];
  /** Slots served, for a master. */
  readonly slots: ReadonlySet<number>;
}

/** The cluster as the node on `port` sees it (`CLUSTER NODES`). */
export async function clusterView(port: number): Promise<ClusterNodeView[]> {
  const lines = String(await askNode(port, 'CLUSTER', 'NODES'))
    .trim()
    .split('\n');
  return lines.map((line) => {
    const [id, address, flags, master, , , , , ...ranges] = line.split(' ');
    const flagList = flags.split(',');
    const slots = new Set<number>();
    for (const range of ranges) {
      if (range.startsWith('[')) continue; // a slot being migrated or imported: `[slot->-id]`
      const [from, to = from] = range.split('-').map(Number);
      for (let slot = from; slot <= to; slot++) slots.add(slot);
    }
    return {
      id,
      port: Number(address.split('@')[0].split(':').pop()),
      role: flagList.includes('master') ? 'master' : 'replica',
      ...(master !== '-' && { masterId: master }),
      trouble: flagList.filter((flag) => ['fail', 'fail?', 'handshake', 'noaddr'].includes(flag)),
      slots,
    };
  });
}

/** The port of the master that serves `slot`, as the node on `askPort` sees it. */
export async function masterOfSlot(askPort: number, slot: number): Promise<number> {
  const owner = (await clusterView(askPort)).find((node) => node.role === 'master' && node.slots.has(slot));
  if (!owner) throw new Error(`no master serves slot ${slot} (asked 127.0.0.1:${askPort})`);
  return owner.port;
}

/** The slot of `key` (`CLUSTER KEYSLOT`). */
export async function slotOf(anyPort: number, key: string): Promise<number> {
  return Number(await askNode(anyPort, 'CLUSTER', 'KEYSLOT', key));
}

/** A slot move under way: importing on the target, migrating on the source. */
export interface SlotMigration {
  readonly slot: number;
  readonly fromPort: number;
  readonly toPort: number;
  /** Moves every key of the slot to the target (`MIGRATE ... KEYS`); resolves with how many. */
  moveKeys(): Promise<number>;
  /** Hands the slot to the target on every master, and waits until every node agrees. */
  finish(): Promise<void>;
}

/**
 * Starts moving `slot` from the master on `fromPort` to the master on `toPort`, as
 * `redis-cli --cluster reshard` does, in steps a test can interleave requests with:
 * `CLUSTER SETSLOT <slot> IMPORTING` on the target and `MIGRATING` on the source (now),
 * `MIGRATE` of the keys (`moveKeys`), `CLUSTER SETSLOT <slot> NODE <target>` (`finish`).
 * While the slot migrates, the source answers for keys it still has and sends `-ASK` for the
 * others.
 */
export async function beginSlotMigration(
  ports: readonly number[],
  slot: number,
  fromPort: number,
  toPort: number,
): Promise<SlotMigration> {
  const view = await clusterView(fromPort);
  const idOf = (port: number): string => {
    const node = view.find((n) => n.port === port);
    if (!node) throw new Error(`127.0.0.1:${port} is not in the cluster`);
    return node.id;
  };
  const fromId = idOf(fromPort);
  const toId = idOf(toPort);
  await askNode(toPort, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
  await askNode(fromPort, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
  return {
    slot,
    fromPort,
    toPort,
    async moveKeys() {
      const keys = (await askNode(fromPort, 'CLUSTER', 'GETKEYSINSLOT', slot, 1_000)) as string[];
      if (keys.length > 0) {
        await askNode(fromPort, 'MIGRATE', '127.0.0.1', toPort, '', 0, 5_000, 'KEYS', ...keys);
      }
      return keys.length;
    },
    async finish() {
      await askNode(toPort, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
      await askNode(fromPort, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
      const masters = (await clusterView(toPort)).filter((node) => node.role === 'master' && ports.includes(node.port));
      for (const master of masters) await askNode(master.port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
      await everyNodeAgrees(
        ports,
        async (port) => (await masterOfSlot(port, slot)) === toPort,
        `slot ${slot} is on ${toPort}`,
      );
    },
  };
}

/**
 * The port of a healthy replica of the master on `masterPort`, once the master sees one: after an
 * earlier failover the demoted node takes a moment to reattach as a replica and finish its sync.
 */
export async function replicaOf(masterPort: number, timeoutMs = 20_000): Promise<number> {
  let port: number | undefined;
  await waitUntil(
    async () => {
      const view = await clusterView(masterPort);
      const master = view.find((node) => node.port === masterPort);
      port = view.find(
        (node) => node.role === 'replica' && node.masterId === master?.id && node.trouble.length === 0,
      )?.port;
      return port !== undefined;
    },
    timeoutMs,
    `127.0.0.1:${masterPort} has a healthy replica`,
  );
  return port!;
}

/**
 * Fails the master on `masterPort` over to its replica: `CLUSTER FAILOVER` on the replica (a
 * coordinated handover that loses no acknowledged write), or, when `crash` is set, SIGKILL of
 * the master through `kill` and the automatic failover the other masters vote for after
 * `cluster-node-timeout`. Resolves with the new master's port once every live node sees it
 * serving the old master's slots.
 */
export async function failOver(
  ports: readonly number[],
  masterPort: number,
  crash?: { kill(port: number): void },
): Promise<number> {
  const replicaPort = await replicaOf(masterPort);
  const slots = [...((await clusterView(masterPort)).find((node) => node.port === masterPort)?.slots ?? [])];
  if (crash) crash.kill(masterPort);
  else await askNode(replicaPort, 'CLUSTER', 'FAILOVER');
  const live = ports.filter((port) => port !== masterPort || !crash);
  await everyNodeAgrees(
    live,
    async (port) => slots.length > 0 && (await masterOfSlot(port, slots[0])) === replicaPort,
    `127.0.0.1:${replicaPort} serves the slots of 127.0.0.1:${masterPort}`,
  );
  await waitUntil(
    async () => String(await askNode(replicaPort, 'CLUSTER', 'INFO')).includes('cluster_state:ok'),
    20_000,
    `the cluster is ok after the failover to 127.0.0.1:${replicaPort}`,
  );
  return replicaPort;
}

async function everyNodeAgrees(
  ports: readonly number[],
  check: (port: number) => Promise<boolean>,
  what: string,
): Promise<void> {
  for (const port of ports) {
    await waitUntil(() => check(port).catch(() => false), 20_000, `127.0.0.1:${port} sees that ${what}`);
  }
}
