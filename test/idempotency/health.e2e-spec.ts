import { ServiceUnavailableException } from '@nestjs/common';
import { HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { IdempotencyModule } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency/terminus';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { openIdempotencyDataSource } from '../utils/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../utils/postgres.js';
import { startRedisServer, type ThrowawayRedis } from '../utils/redis.js';

/**
 * `IdempotencyHealthIndicator` (`nestjs-idempotency/terminus`) on a throwaway redis-server and a
 * PostgreSQL schema of its own: up with both tiers' latency, down when Redis is stopped or the
 * database is gone, and `not-configured` without a durable store.
 */
describe('IdempotencyHealthIndicator', () => {
  let redis: ThrowawayRedis | undefined;
  let schema: string | undefined;
  let dataSource: DataSource | undefined;
  let moduleRef: TestingModule | undefined;

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    redis = await startRedisServer();
    schema = await createThrowawaySchema('health');
    dataSource = await openIdempotencyDataSource(schema);
    moduleRef = await Test.createTestingModule({
      imports: [
        TerminusModule.forRoot({ logger: false }),
        IdempotencyModule.forRoot({
          store: new RedisIdempotencyStore(redis.url, { prefix: 'health' }),
          durableStore: new TypeOrmIdempotencyStore(dataSource),
        }),
      ],
      providers: [IdempotencyHealthIndicator],
    }).compile();
    await moduleRef.init();
  });

  afterAll(async () => {
    await moduleRef?.close();
    await redis?.stop();
    if (dataSource?.isInitialized) await dataSource.destroy();
    if (schema) await dropSchema(schema);
  });

  const check = () => moduleRef!.get(HealthCheckService).check([() => moduleRef!.get(IdempotencyHealthIndicator).isHealthy('idempotency')]);

  it('is up with the latency of each tier while both answer', async () => {
    const result = await check();
    expect(result.status).toBe('ok');
    expect(result.details.idempotency).toEqual({
      status: 'up',
      fast: { status: 'up', latencyMs: expect.any(Number) },
      durable: { status: 'up', latencyMs: expect.any(Number) },
    });
  });

  it('is down, and the check answers 503, once the redis-server is stopped; the durable tier still up', async () => {
    await redis!.stop();
    const failure = await check().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ServiceUnavailableException);
    const details = ((failure as ServiceUnavailableException).getResponse() as { details: Record<string, unknown> }).details;
    expect(details.idempotency).toEqual({
      status: 'down',
      fast: { status: 'down', latencyMs: expect.any(Number), error: expect.stringContaining('Redis idempotency store') },
      durable: { status: 'up', latencyMs: expect.any(Number) },
    });
  });

  it('reports the durable tier down when its database is gone, and refuses a bad timeout', async () => {
    await dataSource!.destroy();
    const result = await moduleRef!.get(IdempotencyHealthIndicator).isHealthy('idempotency', { timeoutMs: 500 });
    expect(result.idempotency).toMatchObject({
      status: 'down',
      durable: { status: 'down', error: expect.stringContaining('Durable idempotency store') },
    });
    await expect(moduleRef!.get(IdempotencyHealthIndicator).isHealthy('idempotency', { timeoutMs: 0 })).rejects.toThrow(RangeError);
  });

  it('says not-configured for a module without a durable store', async () => {
    const memoryOnly = await Test.createTestingModule({
      imports: [TerminusModule.forRoot({ logger: false }), IdempotencyModule.forRoot({})],
      providers: [IdempotencyHealthIndicator],
    }).compile();
    try {
      const result = await memoryOnly.get(IdempotencyHealthIndicator).isHealthy('store');
      expect(result.store).toEqual({ status: 'up', fast: { status: 'up', latencyMs: expect.any(Number) }, durable: { status: 'not-configured' } });
    } finally {
      await memoryOnly.close();
    }
  });
});
