import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import { MemoryIdempotencyStore } from 'nestjs-idempotency';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { startContractApp, type ContractApp, type Platform } from '../support/apps/contract.app.js';
import { DurableSwitchStore } from '../support/stores/durable-switch.store.js';
import { send, type SendOptions } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import { openIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../support/servers/postgres.js';

/**
 * `transactional: true` on a fixture route whose business write is one row in `effects`,
 * written through the engine's transaction (DESIGN step 6), against real PostgreSQL.
 */
describe.each<Platform>(['express', 'fastify'])('transactional routes on PostgreSQL (%s)', (platform) => {
  let schema: string;
  let dataSource: DataSource;
  let durable: DurableSwitchStore;
  let fixture: ContractApp;

  const call = (options: SendOptions) =>
    send(fixture.url, '/tx-effect', { ...options, headers: { 'X-Tenant-ID': 't1', 'X-User-ID': 'u1' } });
  const effects = async (ref: string) =>
    Number((await dataSource.query('SELECT count(*) AS n FROM effects WHERE ref = $1', [ref]))[0].n);

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    schema = await createThrowawaySchema('tx_http');
    dataSource = await openIdempotencyDataSource(schema);
    await dataSource.query('CREATE TABLE effects (ref text NOT NULL, seq integer NOT NULL)');
    durable = new DurableSwitchStore(new TypeOrmIdempotencyStore(dataSource));
    fixture = await startContractApp(platform, new MemoryIdempotencyStore(), { durableStore: durable });
  });
  afterAll(async () => {
    await fixture?.app.close();
    await dataSource?.destroy();
    if (schema) await dropSchema(schema);
  });

  it('the business write commits with the completed record; the retry replays and writes nothing', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const first = await call({ key, body: { ref } });
    expect(first.status).toBe(201);
    const retry = await call({ key, body: { ref } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(first.body)).toBe(true);
    expect(await effects(ref)).toBe(1);
  });

  it('a thrown 5xx rolls the business write back and releases the key; the retry runs again and commits once', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const failed = await call({ key, body: { ref, failOnce: 503 } });
    expect(failed.status).toBe(503);
    expect(await effects(ref)).toBe(0);
    const retry = await call({ key, body: { ref, failOnce: 503 } });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(ref)).toBe(1);
  });

  it('a thrown 4xx rolls the business write back but is stored and replayed (B.7 rule 17)', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const failed = await call({ key, body: { ref, fail: 422 } });
    expect(failed.status).toBe(422);
    const retry = await call({ key, body: { ref, fail: 422 } });
    expect(retry.status).toBe(422);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(failed.body)).toBe(true);
    expect(await effects(ref)).toBe(0);
  });

  it('a forced release of a success rolls the business write back with the key (committed ⇔ completed): the retry runs again', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    expect((await call({ key, body: { ref, release: true } })).status).toBe(201);
    expect(await effects(ref)).toBe(0);
    const retry = await call({ key, body: { ref, release: true } });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(ref)).toBe(0);
  });

  it('the database failing before the transaction starts is a 503, runs nothing, and frees the key', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    durable.failNextTransaction(new Error('connect ECONNREFUSED'));
    const refused = await call({ key, body: { ref } });
    expect(refused.status).toBe(503);
    expect(refused.json().code).toBe('idempotency_store_unavailable');
    expect(await effects(ref)).toBe(0);
    const retry = await call({ key, body: { ref } });
    expect(retry.status).toBe(201);
    expect(await effects(ref)).toBe(1);
  });

  it('a zombie whose lease was taken over before its transaction began fails the owner-token check: it writes nothing, the winner commits once', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const held = durable.holdNextTransaction();
    const zombie = call({ key, body: { ref } });
    await held; // claimed, then frozen before its transaction
    fixture.heartbeats.freeze();
    durable.freeze();
    await sleep(500); // the 300 ms lease lapses
    const winner = await call({ key, body: { ref } });
    fixture.heartbeats.thaw();
    durable.thaw();
    expect(winner.status).toBe(201);
    expect(winner.json()).toMatchObject({ fencing: 2, tookOver: true });
    durable.releaseTransaction();
    const zombieAnswer = await zombie;
    expect(zombieAnswer.status).toBe(409);
    expect(zombieAnswer.json().code).toBe('idempotency_request_in_progress');
    expect(await effects(ref)).toBe(1);
    const retry = await call({ key, body: { ref } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(winner.body)).toBe(true);
  });

  it('a zombie frozen inside its transaction keeps the row locked: the takeover gives up (409), the zombie commits, nothing runs twice', async () => {
    const ref = randomUUID();
    const key = randomUUID();
    const gate = `g-${ref}`;
    const zombie = call({ key, body: { ref, gate } });
    await sleep(100);
    fixture.heartbeats.freeze();
    durable.freeze();
    await sleep(500);
    const contender = await call({ key, body: { ref, gate } });
    fixture.heartbeats.thaw();
    durable.thaw();
    expect(contender.status).toBe(409);
    fixture.probe.open(gate);
    const zombieAnswer = await zombie;
    expect(zombieAnswer.status).toBe(201);
    expect(await effects(ref)).toBe(1);
    const retry = await call({ key, body: { ref, gate } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.equals(zombieAnswer.body)).toBe(true);
  });
});
