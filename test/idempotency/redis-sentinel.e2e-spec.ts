import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { REDIS_FAIL_FAST_OPTIONS, RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { startContractApp, type ContractApp } from '../support/apps/contract.app.js';
import { send, type HttpResult } from '../support/http/send.js';
import { waitForReplicas } from '../support/servers/redis-cluster.js';
import { waitUntil } from '../support/timing.js';
import { startRedisSentinel, type ThrowawayRedisSentinel } from '../support/servers/redis-sentinel.js';

/**
 * The Redis store on an ioredis Sentinel client (`new Redis({ sentinels, name })`), with a
 * master, a replica and a Sentinel of the suite's own, failed over while a request is in
 * progress.
 */
describe('Redis Sentinel: a failover under the HTTP layer (express)', () => {
  let sentinel: ThrowawayRedisSentinel;
  let client: Redis;
  let fixture: ContractApp;

  const call = (key: string, body: Record<string, unknown>): Promise<HttpResult> =>
    send(fixture.url, '/charges', { key, body, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });

  beforeAll(async () => {
    sentinel = await startRedisSentinel();
    client = new Redis({
      sentinels: [...sentinel.sentinels],
      name: sentinel.name,
      failoverDetector: true,
      ...REDIS_FAIL_FAST_OPTIONS,
    });
    client.on('error', () => undefined);
    fixture = await startContractApp('express', new RedisIdempotencyStore(client, { prefix: 'idem-sentinel' }));
  }, 60_000);
  afterAll(async () => {
    await fixture?.app.close();
    client?.disconnect();
    await sentinel?.stop();
  });

  it('replays a record written before SENTINEL FAILOVER, refuses the in-progress duplicate, and completes it on the new master', async () => {
    const done = randomUUID();
    const first = await call(done, { amount: 1 });
    expect(first.status).toBe(201);
    const running = randomUUID();
    const gate = `g-${running}`;
    const original = call(running, { amount: 2, gate });
    await waitUntil(
      async () => (await call(running, { amount: 2, gate })).status === 409,
      10_000,
      'the request is in progress',
    );
    const runs = fixture.probe.runs;
    const oldMaster = await sentinel.masterPort();
    await waitForReplicas(oldMaster); // what WAIT 1 would guarantee: the replica has both records

    const newMaster = await sentinel.failOver();
    expect(newMaster).not.toBe(oldMaster);
    // failoverDetector: on +switch-master, ioredis drops its connection and asks the Sentinel again.
    await waitUntil(
      async () => String(await client.info('server').catch(() => '')).includes(`tcp_port:${newMaster}`),
      20_000,
      `the client reconnected to the new master 127.0.0.1:${newMaster}`,
    );

    const retry = await call(done, { amount: 1 });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    const duplicate = await call(running, { amount: 2, gate });
    expect(duplicate.status).toBe(409);
    expect(duplicate.json().code).toBe('idempotency_request_in_progress');

    fixture.probe.open(gate);
    const finished = await original;
    expect(finished.status).toBe(201);
    const replay = await call(running, { amount: 2, gate });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(finished.body)).toBe(true);
    expect(fixture.probe.runs - runs).toBe(1);
  }, 60_000);
});
