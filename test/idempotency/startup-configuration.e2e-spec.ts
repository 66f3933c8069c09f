import { Controller, Injectable, Module, Post, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern } from '@nestjs/microservices';
import {
  fromHeader,
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyModule,
  IdempotencyService,
  type IdempotencyModuleOptions,
  type IdempotentOptions,
} from 'nestjs-idempotency';
import { IdempotentConsumer } from 'nestjs-idempotency/consumers';
import { idempotentProcessor, type IdempotentProcessorOptions } from 'nestjs-idempotency/bullmq';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { DataSource } from 'typeorm';

/**
 * Configuration fails at startup, not on the first request (issue 18 item 7): every
 * `@Idempotent()` route, every `@IdempotentConsumer()` handler and every `idempotentProcessor()`
 * is checked while the application starts, and a value that cannot work stops it with a message
 * that names the handler and the option. Nothing here needs a server: the application never
 * gets as far as serving.
 */

/** A module with one controller whose `create` route carries `options`. */
function appWithRoute(options: IdempotentOptions, moduleOptions: IdempotencyModuleOptions = {}): Type {
  @Controller('orders')
  class OrdersController {
    @Post()
    @Idempotent(options)
    create() {
      return { ok: true };
    }
  }
  // A tenant resolver: a scope nothing can resolve is refused too (first-hour-startup.e2e-spec.ts).
  @Module({
    imports: [IdempotencyModule.forRoot({ tenant: fromHeader('x-tenant-id'), ...moduleOptions })],
    controllers: [OrdersController],
  })
  class AppModule {}
  return AppModule;
}

/**
 * A real durable store over a data source that is never opened: startup does not touch it, and
 * these applications never serve.
 */
function unopenedDurableStore(): TypeOrmIdempotencyStore {
  return new TypeOrmIdempotencyStore(new DataSource({ type: 'postgres' }));
}

/** What `app.init()` rejects with (it runs before `listen()`: nothing is ever served). */
async function startupFailure(module: Type): Promise<unknown> {
  const app = await NestFactory.create(module, { logger: false, abortOnError: false });
  try {
    await app.init();
    return undefined;
  } catch (error) {
    return error;
  } finally {
    await app.close();
  }
}

describe('@Idempotent() options are checked at startup', () => {
  it.each<[string, IdempotentOptions, IdempotencyModuleOptions, RegExp]>([
    ['a TTL no store can hold', { ttlMs: 10 ** 13 }, {}, /ttlMs must be at most 3155760000000/],
    [
      'a TTL that is not a whole number of ms',
      { ttlMs: Number.POSITIVE_INFINITY },
      {},
      /ttlMs must be a positive integer/,
    ],
    [
      'a heartbeat as long as the lease',
      { leaseMs: 5_000, heartbeatMs: 5_000 },
      {},
      /heartbeatMs \(5000\) must be at most half of leaseMs \(5000\)/,
    ],
    ['a negative lease', { leaseMs: -1 }, {}, /leaseMs must be a positive integer/],
    [
      "'fail-open' on a transactional route",
      { transactional: true, onStoreError: 'fail-open' },
      {},
      /onStoreError: 'fail-open' cannot be used with transactional/,
    ],
    [
      'a heartbeat the lease inherited from the module cannot hold',
      { heartbeatMs: 40_000 },
      { leaseMs: 60_000 },
      /heartbeatMs \(40000\) must be at most half of leaseMs \(60000\)/,
    ],
    ['a negative maxWaitMs', { inProgress: { mode: 'wait', maxWaitMs: -5 } }, {}, /inProgress\.maxWaitMs/],
    [
      'a maxStoredResponseBytes of 0',
      { maxStoredResponseBytes: 0 },
      {},
      /maxStoredResponseBytes must be a positive integer/,
    ],
    [
      'a durable route without a durableStore',
      { durable: true },
      {},
      /durable: true needs a durableStore in IdempotencyModule/,
    ],
    [
      'a transactional route without a durableStore',
      { transactional: true },
      {},
      /transactional: true needs a durableStore in IdempotencyModule/,
    ],
    [
      'a route both durable and transactional without a durableStore',
      { durable: true, transactional: true },
      {},
      /transactional: true needs a durableStore in IdempotencyModule/,
    ],
  ])('%s stops the application, naming the route and the option', async (_case, options, moduleOptions, message) => {
    const failure = await startupFailure(appWithRoute(options, moduleOptions));
    expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
    expect((failure as Error).message).toMatch(
      /^Idempotency configuration: @Idempotent\(\) on OrdersController\.create \(POST \/orders\): /,
    );
    expect((failure as Error).message).toMatch(message);
  });

  it('a route that is not durable may fail open, and starts', async () => {
    expect(await startupFailure(appWithRoute({ onStoreError: 'fail-open', ttlMs: 3_600_000 }))).toBeUndefined();
  });

  it.each<[string, IdempotentOptions]>([
    ['durable', { durable: true }],
    ['transactional', { transactional: true }],
  ])('a %s route starts when the module has a durableStore', async (_case, options) => {
    expect(await startupFailure(appWithRoute(options, { durableStore: unopenedDurableStore() }))).toBeUndefined();
  });
});

describe('@IdempotentConsumer() options are checked at startup', () => {
  function appWithConsumer(options: unknown): Type {
    @Controller()
    class BillingConsumer {
      @EventPattern('order.created')
      @IdempotentConsumer(options as never)
      onOrderCreated(_event: unknown) {
        return undefined;
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({})], controllers: [BillingConsumer] })
    class ConsumerModule {}
    return ConsumerModule;
  }

  it.each<[string, unknown, RegExp]>([
    ['an empty consumer name', { consumer: ' ', key: () => 'k' }, /consumer must be a non-empty string/],
    ['no key function', { consumer: 'billing.order-created' }, /key is required/],
    ['a key that is not a function', { consumer: 'billing.order-created', key: 'eventId' }, /key must be a function/],
    [
      'a TTL no store can hold',
      { consumer: 'billing.order-created', key: () => 'k', options: { ttlMs: 10 ** 14 } },
      /ttlMs must be at most/,
    ],
    [
      "'fail-open' on a durable policy",
      { consumer: 'billing.order-created', key: () => 'k', options: { durable: true, onStoreError: 'fail-open' } },
      /onStoreError: 'fail-open' cannot be used with durable/,
    ],
    [
      'a durable policy without a durableStore',
      { consumer: 'billing.order-created', key: () => 'k', options: { durable: true } },
      /durable: true needs a durableStore in IdempotencyModule/,
    ],
    [
      'a transactional policy without a durableStore',
      { consumer: 'billing.order-created', key: () => 'k', options: { transactional: true } },
      /transactional: true needs a durableStore in IdempotencyModule/,
    ],
  ])('%s stops the application, naming the handler and the option', async (_case, options, message) => {
    const failure = await startupFailure(appWithConsumer(options));
    expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
    expect((failure as Error).message).toMatch(
      /^Idempotency configuration: @IdempotentConsumer\(\) on BillingConsumer\.onOrderCreated: /,
    );
    expect((failure as Error).message).toMatch(message);
  });

  it('a well-configured consumer starts', async () => {
    expect(
      await startupFailure(appWithConsumer({ consumer: 'billing.order-created', key: () => 'k' })),
    ).toBeUndefined();
  });
});

describe('idempotentProcessor() options are checked when the processor is built (at startup)', () => {
  function appWithProcessor(options: IdempotentProcessorOptions): Type {
    @Injectable()
    class MailerProcessor {
      readonly process;
      constructor(idempotency: IdempotencyService) {
        this.process = idempotentProcessor(idempotency, options, async () => 'sent');
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ leaseMs: 60_000 })], providers: [MailerProcessor] })
    class WorkerModule {}
    return WorkerModule;
  }

  async function buildFailure(module: Type): Promise<unknown> {
    return NestFactory.createApplicationContext(module, { logger: false, abortOnError: false }).then(
      async (context) => {
        await context.close();
        return undefined;
      },
      (error: unknown) => error,
    );
  }

  it.each<[string, IdempotentProcessorOptions, RegExp]>([
    [
      'a delay factor of 0',
      { consumer: 'mailer.order-created', inProgressDelayFactor: 0 },
      /inProgressDelayFactor must be a positive finite number/,
    ],
    [
      'a heartbeat the inherited lease cannot hold',
      { consumer: 'mailer.order-created', options: { heartbeatMs: 40_000 } },
      /heartbeatMs \(40000\) must be at most half of leaseMs \(60000\)/,
    ],
    [
      'a transactional policy without a durable store',
      { consumer: 'mailer.order-created', options: { transactional: true } },
      /transactional need a durable store/,
    ],
    ['an empty consumer name', { consumer: '' }, /consumer must be a non-empty string/],
  ])('%s stops the application, naming the consumer and the option', async (_case, options, message) => {
    const failure = await buildFailure(appWithProcessor(options));
    const error = (failure as { cause?: unknown })?.cause ?? failure;
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect((error as Error).message).toMatch(
      /^Idempotency configuration: idempotentProcessor\(('mailer\.order-created')?\): /,
    );
    expect((error as Error).message).toMatch(message);
  });

  it('a well-configured processor is built', async () => {
    expect(
      await buildFailure(appWithProcessor({ consumer: 'mailer.order-created', options: { heartbeatMs: 20_000 } })),
    ).toBeUndefined();
  });
});
