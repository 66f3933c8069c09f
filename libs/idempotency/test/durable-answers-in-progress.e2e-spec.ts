import { Logger } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { randomUUID } from 'node:crypto';
import { IdempotencyService, MemoryIdempotencyStore, type StoredResponse } from 'nestjs-idempotency';
import { buildScopedKey } from '../src/engine/scoped-key.js';
import { resolvePolicy } from '../src/idempotency.options.js';
import { resolveModuleSettings } from '../src/idempotency.options.js';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { openIdempotencyDataSource } from '../../../test/support/servers/idempotency-data-source.js';
import { createThrowawaySchema, dropSchema } from '../../../test/support/servers/postgres.js';
import { RecordingLogger } from '../../../test/support/recording-logger.js';

const FINGERPRINT = 'f'.repeat(43);
const created: StoredResponse = { statusCode: 201, headers: { location: '/orders/1' }, body: Buffer.from('{"id":1}') };

/**
 * On a durable route the fast tier can say "in progress" (a live lease) of a request whose
 * durable row has completed: the owner committed, then could not complete the fast record
 * (Redis cut after the commit). The durable row is the authority, so a retry replays it at once
 * instead of getting 409 until the fast lease lapses (real PostgreSQL, the TypeORM store).
 */
describe('a fast record in progress whose durable row has completed', () => {
  const policy = resolvePolicy({}, { durable: true, leaseMs: 60_000 });
  let schema: string;
  let dataSource: DataSource;
  let fast: MemoryIdempotencyStore;
  let durable: TypeOrmIdempotencyStore;
  let engine: IdempotencyService;

  beforeAll(async () => {
    schema = await createThrowawaySchema('durable-answers');
    dataSource = await openIdempotencyDataSource(schema);
  });

  beforeEach(() => {
    fast = new MemoryIdempotencyStore();
    durable = new TypeOrmIdempotencyStore(dataSource);
    engine = new IdempotencyService(fast, resolveModuleSettings({}), durable);
  });

  afterEach(() => engine.onApplicationShutdown());

  afterAll(async () => {
    if (dataSource?.isInitialized) await dataSource.destroy();
    await dropSchema(schema);
  });

  /** A claim on both tiers whose durable row completes while the fast record stays in progress. */
  async function completedOnlyInDurable() {
    const scoped = buildScopedKey({ operation: 'orders.create', tenant: 't1', key: randomUUID() }, [
      'tenant',
      'operation',
    ]);
    const begun = await engine.begin({ scoped, fingerprint: FINGERPRINT, policy });
    if (begun.kind !== 'claimed') throw new Error(`expected a claim, got ${begun.kind}`);
    expect(await durable.complete(scoped.id, begun.claim.ownerToken, created)).toBe(true);
    expect((await fast.get(scoped.id))?.state).toBe('in_progress');
    return scoped;
  }

  it('replays the committed response at once and completes the fast record from it', async () => {
    const scoped = await completedOnlyInDurable();
    const retry = await engine.begin({ scoped, fingerprint: FINGERPRINT, policy });
    expect(retry.kind).toBe('replay');
    expect(retry.kind === 'replay' && retry.response.body?.toString()).toBe('{"id":1}');
    const repaired = await fast.get(scoped.id);
    expect(repaired?.state).toBe('completed');
    expect(repaired?.response?.headers).toEqual(created.headers);
  });

  it('still answers a different payload with a mismatch', async () => {
    const scoped = await completedOnlyInDurable();
    expect((await engine.begin({ scoped, fingerprint: 'g'.repeat(43), policy })).kind).toBe('mismatch');
  });

  it('answers in progress while the durable row is in progress too (the owner is still at work)', async () => {
    const scoped = buildScopedKey({ operation: 'orders.create', tenant: 't1', key: randomUUID() }, [
      'tenant',
      'operation',
    ]);
    const begun = await engine.begin({ scoped, fingerprint: FINGERPRINT, policy });
    expect(begun.kind).toBe('claimed');
    const duplicate = await engine.begin({ scoped, fingerprint: FINGERPRINT, policy });
    expect(duplicate).toEqual({ kind: 'in-progress', retryAfterSeconds: expect.any(Number) });
  });

  it('answers in progress, not a store error, when the durable store cannot be read', async () => {
    const scoped = await completedOnlyInDurable();
    // Another engine whose durable store has no database: the read fails, the fast tier's answer stands.
    const closed = await openIdempotencyDataSource(schema);
    await closed.destroy();
    const blind = new IdempotencyService(fast, resolveModuleSettings({}), new TypeOrmIdempotencyStore(closed));
    const logs = new RecordingLogger();
    Logger.overrideLogger(logs);
    try {
      expect(await blind.begin({ scoped, fingerprint: FINGERPRINT, policy })).toEqual({
        kind: 'in-progress',
        retryAfterSeconds: expect.any(Number),
      });
      // The failed read is one store-error line, saying the request was answered "in progress".
      expect(logs.at('error')).toEqual([
        expect.stringMatching(/event=store_error .*outcome=answered_in_progress .*tier=durable/),
      ]);
    } finally {
      Logger.overrideLogger(false);
      blind.onApplicationShutdown();
    }
  });
});
