import { ServiceUnavailableException } from '@nestjs/common';
import { HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test, type TestingModule } from '@nestjs/testing';
import type { DataSource } from 'typeorm';
import { IdempotencyModule } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency/terminus';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { openIdempotencyDataSource } from '../support/servers/idempotency-data-source.js';
import { connectPostgresOrFail, createThrowawaySchema, dropSchema } from '../support/servers/postgres.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { RecordingLogger } from '../support/recording-logger.js';

/**
 * `IdempotencyHealthIndicator` (`nestjs-idempotency/terminus`) on a throwaway redis-server and a
 * PostgreSQL schema of its own: up, down when Redis is stopped or the database is gone, and
 * `not-configured` without a durable store. By default a tier says only `up` or `down` (an
 * anonymous `/health` must not show host names or driver errors), and a tier that is down is
 * logged with its error; `details: true` adds latencies and errors for trusted callers.
 */
describe('IdempotencyHealthIndicator', () => {
  let redis: ThrowawayRedis | undefined;
  let schema: string | undefined;
  let dataSource: DataSource | undefined;
  let moduleRef: TestingModule | undefined;
  const logs = new RecordingLogger();

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
    moduleRef.useLogger(logs);
    await moduleRef.init();
  });

  afterAll(async () => {
    await moduleRef?.close();
    await redis?.stop();
    if (dataSource?.isInitialized) await dataSource.destroy();
    if (schema) await dropSchema(schema);
  });

  const indicator = () => moduleRef!.get(IdempotencyHealthIndicator);
  const check = () => moduleRef!.get(HealthCheckService).check([() => indicator().isHealthy('idempotency')]);

  it("is up, with each tier's status only, while both answer; with details, their latency", async () => {
    const result = await check();
    expect(result.status).toBe('ok');
    expect(result.details.idempotency).toEqual({ status: 'up', fast: { status: 'up' }, durable: { status: 'up' } });
    expect((await indicator().isHealthy('idempotency', { details: true })).idempotency).toEqual({
      status: 'up',
      fast: { status: 'up', latencyMs: expect.any(Number) },
      durable: { status: 'up', latencyMs: expect.any(Number) },
    });
  });

  it('is down once the redis-server is stopped: the check answers 503 with statuses only, the error goes to the log', async () => {
    await redis!.stop();
    logs.entries.length = 0;
    const failure = await check().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ServiceUnavailableException);
    const response = (failure as ServiceUnavailableException).getResponse() as Record<string, unknown>;
    expect((response.details as Record<string, unknown>).idempotency).toEqual({
      status: 'down',
      fast: { status: 'down' },
      durable: { status: 'up' },
    });
    // Nothing of the store's error (its host and port, the driver's words) is in what a caller sees.
    expect(JSON.stringify(response)).not.toMatch(/127\.0\.0\.1|Redis idempotency store|ECONNREFUSED|latencyMs/);
    expect(logs.at('warn')).toEqual([
      expect.stringMatching(/^idempotency fast tier down \(its ping failed after [\d.]+ ms\): Redis idempotency store/),
    ]);
  });

  it('with details, says why a tier is down', async () => {
    const result = await indicator().isHealthy('idempotency', { details: true });
    expect(result.idempotency).toEqual({
      status: 'down',
      fast: {
        status: 'down',
        latencyMs: expect.any(Number),
        error: expect.stringContaining('Redis idempotency store'),
      },
      durable: { status: 'up', latencyMs: expect.any(Number) },
    });
  });

  it('reports the durable tier down when its database is gone (why: only with details), and refuses a bad timeout', async () => {
    await dataSource!.destroy();
    logs.entries.length = 0;
    const result = await indicator().isHealthy('idempotency', { timeoutMs: 500 });
    expect(result.idempotency).toEqual({ status: 'down', fast: { status: 'down' }, durable: { status: 'down' } });
    expect(logs.at('warn')).toContainEqual(
      expect.stringMatching(/^idempotency durable tier down .*Durable idempotency store/),
    );
    const detailed = await indicator().isHealthy('idempotency', { timeoutMs: 500, details: true });
    expect(detailed.idempotency).toMatchObject({
      status: 'down',
      durable: { status: 'down', error: expect.stringContaining('Durable idempotency store') },
    });
    await expect(indicator().isHealthy('idempotency', { timeoutMs: 0 })).rejects.toThrow(RangeError);
  });

  it('says not-configured for a module without a durable store', async () => {
    const memoryOnly = await Test.createTestingModule({
      imports: [TerminusModule.forRoot({ logger: false }), IdempotencyModule.forRoot({})],
      providers: [IdempotencyHealthIndicator],
    }).compile();
    try {
      const result = await memoryOnly.get(IdempotencyHealthIndicator).isHealthy('store');
      expect(result.store).toEqual({ status: 'up', fast: { status: 'up' }, durable: { status: 'not-configured' } });
    } finally {
      await memoryOnly.close();
    }
  });
});
