import { randomUUID } from 'node:crypto';
import { HttpException, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Module } from '@nestjs/common';
import {
  IdempotencyFinalException,
  IdempotencyModule,
  IdempotencyRunError,
  IdempotencyService,
  MemoryIdempotencyStore,
  type IdempotencyStore,
} from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { sleep } from '../support/timing.js';
import { connectRedisOrFail, redisUrl } from '../support/servers/redis.js';

/** The programmatic API, `IdempotencyService.run()`, for consumers, webhooks and jobs. */
describe.each<[string, () => IdempotencyStore]>([
  ['memory', () => new MemoryIdempotencyStore()],
  ['redis', () => new RedisIdempotencyStore(redisUrl(), { prefix: `idem-run-${randomUUID().slice(0, 8)}` })],
])('IdempotencyService.run() with the %s store', (name, makeStore) => {
  let context: INestApplicationContext;
  let idempotency: IdempotencyService;
  const operation = 'mailer.order-created';

  beforeAll(async () => {
    if (name === 'redis') await connectRedisOrFail();
    @Module({ imports: [IdempotencyModule.forRoot({ store: makeStore() })] })
    class RunModule {}
    context = await NestFactory.createApplicationContext(RunModule, { logger: false });
    idempotency = context.get(IdempotencyService);
  });
  afterAll(async () => {
    await context?.close();
  });

  it('fresh: runs the function and returns its value', async () => {
    let runs = 0;
    const result = await idempotency.run({ operation, key: randomUUID() }, () => ({ sent: ++runs }));
    expect(result).toEqual({ status: 'fresh', value: { sent: 1 } });
  });

  it('replay: the same key returns the stored value without running the function again', async () => {
    const key = randomUUID();
    let runs = 0;
    const send = () => idempotency.run({ operation, key }, async () => ({ sent: ++runs, at: new Date(0) }));
    expect((await send()).status).toBe('fresh');
    const again = await send();
    expect(again).toEqual({ status: 'replayed', value: { sent: 1, at: '1970-01-01T00:00:00.000Z' } });
    expect(runs).toBe(1);
  });

  it.each<[string, () => unknown]>([
    ['a BigInt', () => ({ amount: 10n })],
    [
      'a circular object (an HTTP client response, say)',
      () => {
        const response: Record<string, unknown> = { status: 200 };
        response.request = { response };
        return response;
      },
    ],
  ])(
    'a result that cannot be encoded (%s) resolves the claim at once: a clear error now, replay-unavailable after, never a second run',
    async (_, result) => {
      const key = randomUUID();
      let runs = 0;
      // Leases far shorter than the wait below: a claim left renewing would still answer in-progress.
      const options = { leaseMs: 300, heartbeatMs: 100 };
      const first = idempotency.run({ operation, key, options }, () => {
        runs++;
        return result();
      });
      await expect(first).rejects.toMatchObject({ kind: 'result-unencodable', retryable: false });
      await sleep(700);
      const retry = idempotency.run({ operation, key, options }, () => ++runs);
      await expect(retry).rejects.toMatchObject({ kind: 'replay-unavailable' });
      expect(runs).toBe(1);
    },
  );

  it('scope: the same key under another operation or tenant is independent', async () => {
    const key = randomUUID();
    let runs = 0;
    await idempotency.run({ operation, key, tenant: 'a' }, () => ++runs);
    await idempotency.run({ operation, key, tenant: 'b' }, () => ++runs);
    await idempotency.run({ operation: 'other', key, tenant: 'a' }, () => ++runs);
    expect(runs).toBe(3);
  });

  it('conflict: the same key with another fingerprint is key-reused', async () => {
    const key = randomUUID();
    await idempotency.run({ operation, key, fingerprint: '{"total":1}' }, () => 'ok');
    await expect(idempotency.run({ operation, key, fingerprint: '{"total":2}' }, () => 'ok')).rejects.toMatchObject({
      kind: 'key-reused',
    });
  });

  it('in progress: a duplicate while the original runs is a retryable in-progress error, and does not run', async () => {
    const key = randomUUID();
    let release!: () => void;
    const original = idempotency.run({ operation, key }, () => new Promise<string>((r) => (release = () => r('done'))));
    await sleep(50);
    let duplicateRan = false;
    const duplicate = await idempotency
      .run({ operation, key }, () => {
        duplicateRan = true;
      })
      .catch((error: unknown) => error);
    expect(duplicate).toBeInstanceOf(IdempotencyRunError);
    expect(duplicate).toMatchObject({ kind: 'in-progress', retryable: true });
    expect((duplicate as IdempotencyRunError).details.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(duplicateRan).toBe(false);
    release();
    expect(await original).toEqual({ status: 'fresh', value: 'done' });
  });

  it("in progress, wait mode: the duplicate waits and gets the original's value", async () => {
    const key = randomUUID();
    let release!: () => void;
    const original = idempotency.run({ operation, key }, () => new Promise<number>((r) => (release = () => r(42))));
    await sleep(50);
    const duplicate = idempotency.run(
      { operation, key, options: { inProgress: { mode: 'wait', maxWaitMs: 5000 } } },
      () => 0,
    );
    await sleep(100);
    release();
    expect(await original).toEqual({ status: 'fresh', value: 42 });
    expect(await duplicate).toEqual({ status: 'replayed', value: 42 });
  });

  it('error: a failure is rethrown and released by default, so the retry runs again', async () => {
    const key = randomUUID();
    let runs = 0;
    const flaky = () =>
      idempotency.run({ operation, key }, () => {
        runs += 1;
        if (runs === 1) throw new Error('SMTP timeout');
        return 'sent';
      });
    await expect(flaky()).rejects.toThrow('SMTP timeout');
    expect(await flaky()).toEqual({ status: 'fresh', value: 'sent' });
    expect(runs).toBe(2);
  });

  it('error: a definitive failure (a stored 4xx, or IdempotencyFinalException) is replayed as replayed-failure', async () => {
    const key = randomUUID();
    let runs = 0;
    const decline = () =>
      idempotency.run({ operation, key }, () => {
        runs += 1;
        throw new HttpException({ reason: 'card declined' }, 402);
      });
    await expect(decline()).rejects.toBeInstanceOf(HttpException);
    await expect(decline()).rejects.toMatchObject({
      kind: 'replayed-failure',
      details: { status: 402, body: { reason: 'card declined' } },
    });
    expect(runs).toBe(1);

    const finalKey = randomUUID();
    await expect(
      idempotency.run({ operation, key: finalKey }, () => {
        throw new IdempotencyFinalException({ reason: 'gone' }, 503);
      }),
    ).rejects.toBeInstanceOf(IdempotencyFinalException);
    await expect(idempotency.run({ operation, key: finalKey }, () => 'never')).rejects.toMatchObject({
      kind: 'replayed-failure',
      details: { status: 503 },
    });
  });

  it('context: derivedKey is stable across runs of one key and the outcome can be forced', async () => {
    const key = randomUUID();
    const keys: string[] = [];
    const once = () =>
      idempotency.run({ operation, key }, (ctx) => {
        keys.push(ctx.derivedKey('smtp'));
        ctx.setOutcome('release');
        return 'sent';
      });
    await once();
    await once();
    expect(keys).toHaveLength(2);
    expect(keys[0]).toBe(keys[1]);
  });
});
