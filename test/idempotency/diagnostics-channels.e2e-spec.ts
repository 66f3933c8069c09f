import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryIdempotencyStore } from 'nestjs-idempotency';
import { IDEMPOTENCY_DIAGNOSTICS_CHANNELS } from 'nestjs-idempotency/telemetry';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';
import { send, type SendOptions } from '../support/http/send.js';
import { sleep, waitUntil } from '../support/timing.js';

type ChannelKey = keyof typeof IDEMPOTENCY_DIAGNOSTICS_CHANNELS;
interface Seen {
  channel: ChannelKey;
  event: Record<string, unknown>;
}

/**
 * The `node:diagnostics_channel` events (docs/operations.md "Diagnostics channels"): one per
 * claim, replay, conflict, takeover, completion, release and lost lease, with the key's hash and
 * never the raw key, seen by a subscriber with no OpenTelemetry SDK registered.
 */
describe('diagnostics_channel events', () => {
  let fixture: ContractApp;
  const seen: Seen[] = [];
  const listeners = (Object.keys(IDEMPOTENCY_DIAGNOSTICS_CHANNELS) as ChannelKey[]).map((channel) => {
    const listener = (event: unknown) => seen.push({ channel, event: event as Record<string, unknown> });
    return [IDEMPOTENCY_DIAGNOSTICS_CHANNELS[channel], listener] as const;
  });
  const call = (path: string, options: SendOptions = {}) =>
    send(fixture.url, path, { ...options, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });
  /** Waits until a /short-lease request has reached its handler (it records its context there). */
  const holdsClaim = async (pending: Promise<unknown>) => {
    const before = fixture.probe.contexts.length;
    void pending;
    await waitUntil(async () => fixture.probe.contexts.length > before, 10_000, 'the request holds its claim');
  };
  /** The events of one key (by its hash, taken from its claim), in order. */
  const eventsOf = (keyHash: unknown) => seen.filter((s) => s.event.keyHash === keyHash);

  beforeAll(async () => {
    for (const [name, listener] of listeners) subscribe(name, listener);
    fixture = await startContractApp('express', new MemoryIdempotencyStore());
  });
  afterAll(async () => {
    for (const [name, listener] of listeners) unsubscribe(name, listener);
    await fixture?.app.close();
  });
  beforeEach(() => {
    seen.length = 0;
  });

  it('a fresh request publishes claim then complete; its retry a replay; another payload a mismatch', async () => {
    const key = randomUUID();
    expect((await call('/charges', { key, body: { amount: 1 } })).status).toBe(201);
    expect((await call('/charges', { key, body: { amount: 1 } })).status).toBe(201);
    expect((await call('/charges', { key, body: { amount: 2 } })).status).toBe(422);

    const claim = seen.find((s) => s.channel === 'claim')!;
    expect(claim.event).toEqual({
      keyHash: expect.any(String),
      operation: 'POST /charges',
      tenant: 't1',
      tier: 'fast',
      tookOver: false,
      fencingToken: 1,
    });
    expect(eventsOf(claim.event.keyHash).map((s) => s.channel)).toEqual(['claim', 'complete', 'replay', 'conflict']);
    const [, complete, replay, conflict] = eventsOf(claim.event.keyHash);
    expect(complete.event).toMatchObject({ operation: 'POST /charges', fencingToken: 1 });
    expect(replay.event).toMatchObject({ statusCode: 201, replayable: true });
    expect(conflict.event).toMatchObject({ kind: 'mismatch' });
    expect(JSON.stringify(seen)).not.toContain(key);
  });

  it('a duplicate while the original runs publishes an in-progress conflict', async () => {
    const key = randomUUID();
    const gate = `g-${key}`;
    const running = call('/charges', { key, body: { amount: 1, gate } });
    await sleep(100);
    expect((await call('/charges', { key, body: { amount: 1, gate } })).status).toBe(409);
    fixture.probe.open(gate);
    expect((await running).status).toBe(201);
    expect(seen.filter((s) => s.channel === 'conflict').map((s) => s.event.kind)).toEqual(['in_progress']);
  });

  it('a 5xx publishes a release; a response too large to store replays as unavailable', async () => {
    expect((await call('/status/500', { key: randomUUID(), body: {} })).status).toBe(500);
    const big = randomUUID();
    await call('/big', { key: big, body: {} });
    expect((await call('/big', { key: big, body: {} })).status).toBe(409);
    expect(seen.filter((s) => s.channel === 'release').map((s) => s.event)).toEqual([
      { keyHash: expect.any(String), operation: 'POST /status/:status', tenant: 't1', tier: 'fast', fencingToken: 1 },
    ]);
    expect(seen.filter((s) => s.channel === 'replay').map((s) => s.event)).toEqual([
      expect.objectContaining({ replayable: false, statusCode: 201 }),
    ]);
  });

  it('a dead lease publishes a takeover and a claim that took over; the zombie a lost lease', async () => {
    const key = randomUUID();
    const gate = `g-${key}`;
    const zombie = call('/short-lease', { key, body: { gate } });
    await holdsClaim(zombie);
    fixture.heartbeats.freeze();
    await sleep(500);
    const winner = await call('/short-lease', { key, body: { gate } });
    fixture.heartbeats.thaw();
    expect(winner.json()).toMatchObject({ tookOver: true, fencing: 2 });
    fixture.probe.open(gate);
    await zombie;

    const keyHash = seen.find((s) => s.channel === 'claim')!.event.keyHash;
    const channels = eventsOf(keyHash).map((s) => s.channel);
    expect(channels.slice(0, 4)).toEqual(['claim', 'takeover', 'claim', 'complete']);
    expect(channels).toContain('leaseLost');
    expect(eventsOf(keyHash).find((s) => s.channel === 'takeover')!.event).toMatchObject({ outcome: 'taken_over' });
    expect(eventsOf(keyHash).filter((s) => s.channel === 'claim')[1].event).toMatchObject({
      tookOver: true,
      fencingToken: 2,
    });
    expect(eventsOf(keyHash).find((s) => s.channel === 'leaseLost')!.event).toMatchObject({
      fencingToken: 1,
      phase: expect.stringMatching(/^(heartbeat|complete)$/),
    });
  });

  it("under staleLock 'fail', a dead lease publishes a takeover with outcome_unknown and no claim", async () => {
    const key = randomUUID();
    const gate = `g-${key}`;
    const zombie = call('/stale-fail', { key, body: { gate } });
    await sleep(100);
    fixture.heartbeats.freeze();
    await sleep(500);
    expect((await call('/stale-fail', { key, body: { gate } })).status).toBe(500);
    fixture.heartbeats.thaw();
    fixture.probe.open(gate);
    await zombie;
    const takeovers = seen.filter((s) => s.channel === 'takeover');
    expect(takeovers.map((s) => s.event.outcome)).toEqual(['outcome_unknown']);
    expect(eventsOf(takeovers[0].event.keyHash).filter((s) => s.channel === 'claim')).toHaveLength(1);
  });

  it('a transactional route (the sample on its embedded defaults) publishes claim and complete on the durable tier', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'diagnostics-'));
    const orders = await createOrdersApp({ env: { DATA_DIR: dir }, logger: false });
    try {
      await orders.listen(0, '127.0.0.1');
      const url = (await orders.getUrl()).replace('[::1]', '127.0.0.1');
      const res = await send(url, '/orders', {
        key: randomUUID(),
        body: orderBody(),
        headers: { 'X-Tenant-ID': newTenant() },
      });
      expect(res.status).toBe(201);
      // (The order's notification, a consumer of the same engine, publishes events of its own.)
      const order = seen.filter((s) => s.event.operation === 'orders.create');
      expect(order.map((s) => [s.channel, s.event.operation, s.event.tier])).toEqual([
        ['claim', 'orders.create', 'durable'],
        ['complete', 'orders.create', 'durable'],
      ]);
    } finally {
      await orders.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
