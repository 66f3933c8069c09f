import { randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import { IdempotencyStoreError } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { send, type HttpResult } from '../support/http/send.js';
import { askNode } from '../support/servers/redis-server.js';
import {
  openRedisCluster,
  startRedisCluster,
  waitForReplicas,
  type ThrowawayRedisCluster,
} from '../support/servers/redis-cluster.js';
import { waitUntil } from '../support/timing.js';
import { beginSlotMigration, failOver, masterOfSlot, slotOf } from '../support/servers/redis-cluster-reshape.js';
import { claimRequest, newId, sampleResponse } from 'nestjs-idempotency/testing';
import { sleep } from '../support/timing.js';

/** Resolves after `ms` without keeping the process alive. */
const later = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

/**
 * The Redis store on a real three-master cluster with one replica per master, reshaped while
 * requests are under way: a record's slot moves to another master between the original and the
 * retry, and masters fail over (coordinated, and by a crash). The cluster is this suite's own.
 */
describe('Redis Cluster: slot moves and failovers under the HTTP layer (express)', () => {
  let cluster: ThrowawayRedisCluster;
  let client: Cluster;
  let fixture: ContractApp;
  /** Nodes still running (a crash test kills one). */
  let live: number[];
  const prefix = `idem-cl-${randomUUID().slice(0, 8)}`;

  const call = (key: string, body: Record<string, unknown>): Promise<HttpResult> =>
    send(fixture.url, '/charges', { key, body, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });

  /** Every record key of this suite, read from every live node. */
  async function recordKeys(): Promise<Set<string>> {
    const keys = new Set<string>();
    for (const port of live) {
      const found = (await askNode(port, 'KEYS', `${prefix}:*`).catch(() => [])) as string[];
      for (const key of found) keys.add(key);
    }
    return keys;
  }

  /** Runs `action` and returns the one record key it creates (waits for it to appear). */
  async function newRecordKey<T>(action: () => T): Promise<{ key: string; result: T }> {
    const before = await recordKeys();
    const result = action();
    let created: string[] = [];
    await waitUntil(
      async () => {
        created = [...(await recordKeys())].filter((key) => !before.has(key));
        return created.length > 0;
      },
      10_000,
      'the request created its record',
    );
    expect(created).toHaveLength(1);
    return { key: created[0], result };
  }

  /** A completed request whose record lives on the master on `masterPort`; tries fresh keys. */
  async function completedOn(masterPort: number): Promise<{ key: string; first: HttpResult; recordKey: string }> {
    for (let attempt = 0; attempt < 60; attempt++) {
      const key = randomUUID();
      const { key: recordKey, result } = await newRecordKey(() => call(key, { amount: attempt }));
      const first = await result;
      expect(first.status).toBe(201);
      if ((await masterOfSlot(live[0], await slotOf(live[0], recordKey))) === masterPort)
        return { key, first, recordKey };
    }
    throw new Error(`no record landed on 127.0.0.1:${masterPort} in 60 attempts`);
  }

  const expectReplayOf = (retry: HttpResult, first: HttpResult): void => {
    expect(retry.status).toBe(first.status);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
  };

  const expectInProgress = (res: HttpResult): void => {
    expect(res.status).toBe(409);
    expect(res.json().code).toBe('idempotency_request_in_progress');
  };

  beforeAll(async () => {
    cluster = await startRedisCluster(3, { replicasPerMaster: 1 });
    live = cluster.nodes.map((node) => node.port);
    client = await openRedisCluster(cluster);
    fixture = await startContractApp('express', new RedisIdempotencyStore(client, { prefix }));
  }, 60_000);
  afterAll(async () => {
    await fixture?.app.close();
    client?.disconnect();
    await cluster?.stop();
  });

  it('replays a completed record after its slot moved to another master (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE)', async () => {
    const key = randomUUID();
    const { key: recordKey, result } = await newRecordKey(() => call(key, { amount: 1 }));
    const first = await result;
    expect(first.status).toBe(201);
    const runs = fixture.probe.runs;
    const slot = await slotOf(live[0], recordKey);
    const from = await masterOfSlot(live[0], slot);
    const target = await anotherMaster(live, from);

    const migration = await beginSlotMigration(live, slot, from, target);
    expectReplayOf(await call(key, { amount: 1 }), first); // served by the source, which still has the key
    expect(await migration.moveKeys()).toBe(1);
    expectReplayOf(await call(key, { amount: 1 }), first); // the source answers -ASK: served by the target
    await migration.finish();
    expectReplayOf(await call(key, { amount: 1 }), first); // -MOVED, then the new slot map

    expect(await askNode(target, 'EXISTS', recordKey)).toBe(1);
    expect(await askNode(from, 'CLUSTER', 'COUNTKEYSINSLOT', slot)).toBe(0);
    expect(fixture.probe.runs).toBe(runs);
  }, 60_000);

  it('keeps refusing duplicates of an in-progress request while its slot moves, and its owner completes it on the new master', async () => {
    const key = randomUUID();
    const gate = `g-${key}`;
    const runs = fixture.probe.runs;
    const { key: recordKey, result: original } = await newRecordKey(() => call(key, { amount: 2, gate }));
    const slot = await slotOf(live[0], recordKey);
    const from = await masterOfSlot(live[0], slot);
    const target = await anotherMaster(live, from);

    const migration = await beginSlotMigration(live, slot, from, target);
    expectInProgress(await call(key, { amount: 2, gate }));
    expect(await migration.moveKeys()).toBe(1);
    expectInProgress(await call(key, { amount: 2, gate }));
    await migration.finish();
    expectInProgress(await call(key, { amount: 2, gate }));

    fixture.probe.open(gate);
    const done = await original;
    expect(done.status).toBe(201);
    expectReplayOf(await call(key, { amount: 2, gate }), done);
    expect(fixture.probe.runs - runs).toBe(1);
  }, 60_000);

  it('survives a coordinated failover (CLUSTER FAILOVER on the replica): replays, refuses the in-progress duplicate, completes on the new master', async () => {
    const key = randomUUID();
    const gate = `g-${key}`;
    const { key: recordKey, result: original } = await newRecordKey(() => call(key, { amount: 3, gate }));
    const master = await masterOfSlot(live[0], await slotOf(live[0], recordKey));
    const done = await completedOn(master);
    const runs = fixture.probe.runs;

    const promoted = await failOver(live, master);
    expect(promoted).not.toBe(master);
    expect(await askNode(promoted, 'EXISTS', done.recordKey)).toBe(1);

    expectReplayOf(await call(done.key, { amount: (done.first.json() as { amount: number }).amount }), done.first);
    expectInProgress(await call(key, { amount: 3, gate }));
    fixture.probe.open(gate);
    const finished = await original;
    expect(finished.status).toBe(201);
    expectReplayOf(await call(key, { amount: 3, gate }), finished);
    expect(fixture.probe.runs - runs).toBe(1);
  }, 60_000);

  it('survives a crashed master (SIGKILL, automatic failover): the retry replays the record written before the crash', async () => {
    const key = randomUUID();
    const { key: recordKey, result } = await newRecordKey(() => call(key, { amount: 4 }));
    const first = await result;
    expect(first.status).toBe(201);
    const master = await masterOfSlot(live[0], await slotOf(live[0], recordKey));
    await waitForReplicas(master); // what WAIT 1 would guarantee: the replica has the record
    const runs = fixture.probe.runs;

    live = live.filter((port) => port !== master);
    const promoted = await failOver([...live, master], master, { kill: (port) => cluster.servers.get(port)?.kill() });
    expect(live).toContain(promoted);

    // Until the client has the new slot map, requests fail closed (503), never run the handler again.
    let retry: HttpResult | undefined;
    await waitUntil(
      async () => {
        retry = await call(key, { amount: 4 });
        if (retry.status === 503) return false;
        return true;
      },
      20_000,
      'a retry gets an answer other than 503',
    );
    expectReplayOf(retry!, first);
    expect(fixture.probe.runs).toBe(runs);
  }, 60_000);
});

/** A master other than the one on `port`. */
async function anotherMaster(ports: readonly number[], port: number): Promise<number> {
  for (const candidate of ports) {
    if (candidate === port) continue;
    const info = String(await askNode(candidate, 'INFO', 'replication'));
    if (info.includes('role:master')) return candidate;
  }
  throw new Error(`no master other than 127.0.0.1:${port}`);
}

describe('Redis Cluster (three masters): scripts and waiters', () => {
  let cluster: ThrowawayRedisCluster;
  let client: Cluster;

  beforeAll(async () => {
    cluster = await startRedisCluster(3);
    client = await openRedisCluster(cluster);
  }, 60_000);
  afterAll(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  /**
   * Every script the store registers, run with the `#!lua` shebang (Redis 7 script flags, without
   * `allow-cross-slot-keys`): the server then rejects any access to a key outside the slot of
   * KEYS[1], which plain EVAL scripts would be allowed on a node that happens to own both slots.
   */
  describe('every store script touches one slot', () => {
    /** Redefines every script of `client` with the shebang; returns how many. */
    function makeScriptsStrict(target: Cluster): number {
      const scripts = (
        target as unknown as { scriptsSet: Record<string, { lua: string; numberOfKeys: number | null }> }
      ).scriptsSet;
      const names = Object.keys(scripts);
      for (const name of names) {
        const { lua, numberOfKeys } = scripts[name];
        expect(numberOfKeys).toBe(1);
        expect(lua).not.toMatch(/allow-cross-slot-keys/);
        target.defineCommand(name, { lua: lua.startsWith('#!') ? lua : `#!lua\n${lua}`, numberOfKeys: 1 });
      }
      return names.length;
    }

    it('runs claim, takeOver, extend, complete, release, get and restore with cross-slot access forbidden', async () => {
      const strict = await readyCopy(client);
      const store = new RedisIdempotencyStore(strict, { prefix: 'strict' });
      try {
        expect(makeScriptsStrict(strict)).toBeGreaterThanOrEqual(7);
        for (let i = 0; i < 6; i++) {
          const id = newId();
          const { record } = await store.claim(id, claimRequest({ leaseMs: 50 }));
          expect((await store.claim(id, claimRequest())).kind).toBe('existing');
          await sleep(60);
          const taken = await store.takeOver(id, record.ownerToken, claimRequest());
          expect(taken.kind).toBe('claimed');
          expect(await store.extend(id, taken.record.ownerToken, 60_000)).toBe(true);
          expect(await store.complete(id, taken.record.ownerToken, sampleResponse())).toBe(true);
          const stored = await store.get(id);
          expect(stored?.state).toBe('completed');

          const other = newId();
          const released = await store.claim(other, claimRequest());
          expect(await store.release(other, released.record.ownerToken)).toBe(true);
          expect(await store.restore(other, stored!)).toBe(true);
          expect((await store.get(other))?.state).toBe('completed');
          expect(await store.waitForChange(id, 1_000)).toBeUndefined();
        }
      } finally {
        await store.onApplicationShutdown();
        strict.disconnect();
      }
    });

    it('has teeth: that mode rejects a script that reads a key of another slot on the same node, which plain EVAL allows', async () => {
      const probe = await readyCopy(client);
      try {
        const lua = "redis.call('GET', KEYS[1])\nreturn redis.call('GET', ARGV[1])";
        probe.defineCommand('crossSlotStrict', { lua: `#!lua\n${lua}`, numberOfKeys: 1 });
        probe.defineCommand('crossSlotCompat', { lua, numberOfKeys: 1 });
        const [first, second] = await twoKeysOnOneNodeInTwoSlots(await masterOfSlot(cluster.nodes[0].port, 0));
        type Probe = (key: string, other: string) => Promise<unknown>;
        const { crossSlotStrict, crossSlotCompat } = probe as unknown as Record<
          'crossSlotStrict' | 'crossSlotCompat',
          Probe
        >;
        await expect(crossSlotStrict.call(probe, first, second)).rejects.toThrow(/do not hash to the same slot/);
        await expect(crossSlotCompat.call(probe, first, second)).resolves.toBeNull();
      } finally {
        probe.disconnect();
      }
    });
  });

  describe('every node down', () => {
    it('fails each call fast with IdempotencyStoreError while the cluster is down, and claims again once it is back', async () => {
      const store = new RedisIdempotencyStore(client, { prefix: 'outage' });
      const attempt = (): Promise<unknown> =>
        Promise.race([
          store.claim(newId(), claimRequest()).then(
            () => 'claimed',
            (error: unknown) => error,
          ),
          later(10_000).then(() => 'still pending after 10 s'),
        ]);
      try {
        expect(await attempt()).toBe('claimed');
        for (const { port } of cluster.nodes) cluster.servers.get(port)?.kill();
        expect(await attempt()).toBeInstanceOf(IdempotencyStoreError);
        await waitUntil(async () => client.status !== 'ready', 10_000, 'the client saw the cluster go down');
        expect(await attempt()).toBeInstanceOf(IdempotencyStoreError);

        for (const { port } of cluster.nodes) await cluster.restart(port);
        await waitUntil(async () => (await attempt()) === 'claimed', 30_000, 'the store claims again');
      } finally {
        await store.onApplicationShutdown();
      }
    }, 60_000);
  });

  describe('waiters (regular pub/sub: a PUBLISH reaches every node over the cluster bus)', () => {
    /** The nodes where `channel` has a subscriber (PUBSUB NUMSUB counts a node's own clients). */
    async function subscribedNodes(channel: string): Promise<number[]> {
      const ports: number[] = [];
      for (const { port } of cluster.nodes) {
        const [, count] = (await askNode(port, 'PUBSUB', 'NUMSUB', channel)) as [string, number];
        if (Number(count) > 0) ports.push(port);
      }
      return ports;
    }

    it('wakes a waiter whose subscriber connection was dropped: ioredis resubscribes, and the completion arrives', async () => {
      const store = new RedisIdempotencyStore(client, { prefix: 'waiters' });
      try {
        const id = newId();
        const channel = `waiters:done:{${id}}`;
        const { record } = await store.claim(id, claimRequest());
        let woken = false;
        const waiting = store.waitForChange(id, 30_000).then(() => {
          woken = true;
        });
        let subscribedOn: number[] = [];
        await waitUntil(
          async () => (subscribedOn = await subscribedNodes(channel)).length === 1,
          10_000,
          'the waiter subscribed',
        );
        await askNode(subscribedOn[0], 'CLIENT', 'KILL', 'TYPE', 'pubsub');
        await waitUntil(
          async () => (await subscribedNodes(channel)).length === 1,
          10_000,
          'ioredis resubscribed the channel',
        );
        expect(woken).toBe(false);

        expect(await store.complete(id, record.ownerToken, sampleResponse())).toBe(true);
        expect(await Promise.race([waiting.then(() => 'woken'), later(15_000).then(() => 'still waiting')])).toBe(
          'woken',
        );
      } finally {
        await store.onApplicationShutdown();
      }
    });
  });
});

/** A new client with the options of `client`, once it is ready. */
async function readyCopy(client: Cluster): Promise<Cluster> {
  const copy = client.duplicate();
  copy.on('error', () => undefined);
  await waitUntil(async () => copy.status === 'ready', 15_000, 'the Cluster client is ready');
  return copy;
}

/** Two keys that live on the master on `port` but in different slots. */
async function twoKeysOnOneNodeInTwoSlots(port: number): Promise<[string, string]> {
  const found: string[] = [];
  const slots = new Set<number>();
  for (let i = 0; found.length < 2 && i < 1_000; i++) {
    const key = `probe-${i}`;
    const slot = await slotOf(port, key);
    if ((await masterOfSlot(port, slot)) !== port || slots.has(slot)) continue;
    slots.add(slot);
    found.push(key);
  }
  if (found.length < 2) throw new Error(`found no two keys on 127.0.0.1:${port}`);
  return [found[0], found[1]];
}
