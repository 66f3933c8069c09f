import {
  Controller,
  Delete,
  Get,
  Injectable,
  Module,
  Patch,
  Post,
  Put,
  UseInterceptors,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern } from '@nestjs/microservices';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import {
  createIdempotentDecorator,
  fromHeader,
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyInterceptor,
  IdempotencyModule,
  SkipIdempotency,
  type IdempotencyModuleOptions,
} from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { RecordingLogger } from '../support/recording-logger.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';

/**
 * The first hour (issue 26): the mistakes a new user makes stop the application at startup
 * (or warn, where a refusal would be wrong) with a message that names the handler, its route
 * and the fix, on Express and on Fastify. None of these applications serves a request.
 */

type Platform = 'express' | 'fastify';

/** Starts `module` (init only, nothing is served): what it rejects with, and what it logged. */
async function start(platform: Platform, module: Type): Promise<{ failure: unknown; logger: RecordingLogger }> {
  const logger = new RecordingLogger();
  const options = { logger, abortOnError: false };
  let app: INestApplication | undefined;
  try {
    app =
      platform === 'express'
        ? await NestFactory.create(module, options)
        : await NestFactory.create(module, new FastifyAdapter(), options);
    await app.init();
    return { failure: undefined, logger };
  } catch (failure) {
    return { failure, logger };
  } finally {
    await app?.close();
  }
}

function appOf(controllers: Type[], options: IdempotencyModuleOptions = {}, protectAllRoutes = false): Type {
  @Module({ imports: [IdempotencyModule.forRoot({ ...options, protectAllRoutes })], controllers })
  class AppModule {}
  return AppModule;
}

async function refusal(platform: Platform, module: Type): Promise<string> {
  const { failure } = await start(platform, module);
  expect(failure).toBeInstanceOf(IdempotencyConfigurationError);
  return (failure as Error).message;
}

@Injectable()
class BrandedInterceptor extends IdempotencyInterceptor {}
const BrandedIdempotent = createIdempotentDecorator(BrandedInterceptor);

describe.each<Platform>(['express', 'fastify'])('mistakes stop the application at startup (%s)', (platform) => {
  it('a scope with a tenant that nothing resolves names the route and the fixes', async () => {
    @Controller('orders')
    class OrdersController {
      @Post()
      @Idempotent({ required: true })
      create() {}
    }
    const message = await refusal(platform, appOf([OrdersController]));
    expect(message).toContain('@Idempotent() on OrdersController.create (POST /orders)');
    expect(message).toContain('no `tenant` resolver and no `anonymousScope`');
    expect(message).toContain("tenant: fromHeader('x-tenant-id')");
    expect(message).toContain("scope: ['principal', 'operation']");
    // With a resolver (or without 'tenant' in the scope) the same application starts.
    expect(
      (await start(platform, appOf([OrdersController], { tenant: fromHeader('x-tenant-id') }))).failure,
    ).toBeUndefined();
    expect((await start(platform, appOf([OrdersController], { scope: ['operation'] }))).failure).toBeUndefined();
  });

  it('in the global mode, the first POST route a tenantless scope cannot serve is named', async () => {
    @Controller('carts')
    class CartsController {
      @Get()
      list() {}
      @Post('checkout')
      checkout() {}
    }
    const message = await refusal(platform, appOf([CartsController], {}, true));
    expect(message).toContain('protectAllRoutes on CartsController.checkout (POST /carts/checkout)');
    expect(message).toContain("the scope includes 'tenant'");
  });

  it.each<[string, Type]>([
    [
      'PUT',
      (() => {
        @Controller('orders')
        class OrdersController {
          @Put(':id')
          @Idempotent({ required: true })
          replace() {}
        }
        return OrdersController;
      })(),
    ],
    [
      'DELETE',
      (() => {
        @Controller('orders')
        class OrdersController {
          @Delete(':id')
          @Idempotent()
          replace() {}
        }
        return OrdersController;
      })(),
    ],
  ])('@Idempotent() on a route whose method is outside `methods` (%s) is refused', async (_case, controller) => {
    const message = await refusal(platform, appOf([controller], { scope: ['operation'] }));
    expect(message).toMatch(/@Idempotent\(\) on OrdersController\.replace \((PUT|DELETE) \/orders\/:id\)/);
    expect(message).toMatch(/the route answers (PUT|DELETE), which is not in methods \(POST, PATCH\)/);
    expect(message).toMatch(/@Idempotent\(\{ methods: \['(PUT|DELETE)'\] \}\)/);
  });

  it('@Idempotent({ methods: [...] }) naming the route method starts', async () => {
    @Controller('orders')
    class OrdersController {
      @Put(':id')
      @Idempotent({ methods: ['PUT'] })
      replace() {}
    }
    expect((await start(platform, appOf([OrdersController], { scope: ['operation'] }))).failure).toBeUndefined();
  });

  it('a controller-wide @Idempotent() leaves its other methods alone and starts', async () => {
    @Controller('orders')
    @Idempotent()
    class OrdersController {
      @Get()
      list() {}
      @Patch(':id')
      update() {}
    }
    expect((await start(platform, appOf([OrdersController], { scope: ['operation'] }))).failure).toBeUndefined();
  });

  it('@Idempotent() on a @MessagePattern() handler is refused, pointing to @IdempotentConsumer()', async () => {
    @Controller()
    class BillingController {
      @MessagePattern('billing.charge')
      @Idempotent({ required: true })
      charge() {}
    }
    const message = await refusal(platform, appOf([BillingController], { scope: ['operation'] }));
    expect(message).toContain('@Idempotent() on BillingController.charge');
    expect(message).toContain('a message handler (@MessagePattern() / @EventPattern())');
    expect(message).toContain('@IdempotentConsumer()');
  });

  it('@Idempotent() on a provider (a gateway, a resolver) is refused, pointing to run() and @IdempotentConsumer()', async () => {
    @Injectable()
    class ChatGateway {
      @Idempotent()
      onMessage() {}
    }
    @Module({ imports: [IdempotencyModule.forRoot({ scope: ['operation'] })], providers: [ChatGateway] })
    class GatewayModule {}
    const message = await refusal(platform, GatewayModule);
    expect(message).toContain('@Idempotent() on ChatGateway.onMessage');
    expect(message).toContain('a WebSocket gateway, a GraphQL resolver or another provider');
    expect(message).toContain('IdempotencyService.run()');
  });

  it.each<[string, Type]>([
    [
      'a subclass decorator plus @Idempotent()',
      (() => {
        @Controller('orders')
        class OrdersController {
          @Post()
          @BrandedIdempotent()
          @Idempotent()
          create() {}
        }
        return OrdersController;
      })(),
    ],
    [
      '@UseInterceptors(a subclass) on the controller plus @Idempotent()',
      (() => {
        @Controller('orders')
        @UseInterceptors(BrandedInterceptor)
        class OrdersController {
          @Post()
          @Idempotent()
          create() {}
        }
        return OrdersController;
      })(),
    ],
  ])('two different idempotency interceptors on one route are refused: %s', async (_case, controller) => {
    const message = await refusal(platform, appOf([controller], { scope: ['operation'] }));
    expect(message).toContain('@Idempotent() on OrdersController.create (POST /orders)');
    expect(message).toMatch(
      /binds 2 different idempotency interceptors \((BrandedInterceptor, IdempotencyInterceptor|IdempotencyInterceptor, BrandedInterceptor)\)/,
    );
  });

  it('@Idempotent() and @SkipIdempotency() on one handler are refused', async () => {
    @Controller('orders')
    class OrdersController {
      @Post()
      @Idempotent()
      @SkipIdempotency()
      create() {}
    }
    const message = await refusal(platform, appOf([OrdersController], { scope: ['operation'] }));
    expect(message).toContain('@Idempotent() and @SkipIdempotency() on one handler');
  });

  it('leaseMs alone no longer stops the application: the heartbeat follows the lease', async () => {
    @Controller('orders')
    class OrdersController {
      @Post()
      @Idempotent({ leaseMs: 15_000 })
      create() {}
    }
    const { failure, logger } = await start(
      platform,
      appOf([OrdersController], { scope: ['operation'], leaseMs: 6_000 }),
    );
    expect(failure).toBeUndefined();
    expect(logger.at('log').join('\n')).toContain('lease 6s, heartbeat 2s');
  });

  it('one startup line names the store, the durable store, the scope and the policy', async () => {
    @Controller('orders')
    class OrdersController {
      @Post()
      @Idempotent()
      create() {}
    }
    const { logger } = await start(platform, appOf([OrdersController], { tenant: fromHeader('x-tenant-id') }, true));
    const lines = logger.at('log').filter((line) => line.includes('durable store'));
    expect(lines).toEqual([
      'store MemoryIdempotencyStore (this process only), durable store none, scope tenant+principal+operation ' +
        '(tenant: resolver, principal: request.user), policy: POST,PATCH, key optional, ttl 86400s, lease 30s, ' +
        'heartbeat 10s, 5xx released, 4xx stored, dead lease: takeover, store down: fail-closed, ' +
        'global mode on (every POST/PATCH route unless @SkipIdempotency()) Idempotency',
    ]);
  });

  it('the memory store under NODE_ENV=production is a warning that names the fix', async () => {
    const before = process.env.NODE_ENV;
    process.env.NODE_ENV = 'production';
    try {
      const { failure, logger } = await start(platform, appOf([], { scope: ['operation'] }));
      expect(failure).toBeUndefined();
      const warning = logger.at('warn').find((line) => line.includes('memory store'));
      expect(warning).toContain('with several instances');
      expect(warning).toContain('new RedisIdempotencyStore(process.env.REDIS_URL)');
    } finally {
      if (before === undefined) delete process.env.NODE_ENV;
      else process.env.NODE_ENV = before;
    }
    const { logger } = await start(platform, appOf([], { scope: ['operation'] }));
    expect(logger.at('warn').filter((line) => line.includes('memory store'))).toEqual([]);
  });
});

describe.each<Platform>(['express', 'fastify'])('a Redis that may evict the records (%s)', (platform) => {
  let lru: ThrowawayRedis;
  beforeAll(async () => {
    // A server of our own: the shared 6379 is never reconfigured.
    lru = await startRedisServer({ args: ['--maxmemory-policy', 'allkeys-lru', '--maxmemory', '64mb'] });
  });
  afterAll(() => lru.stop());

  it('stops the application by default, naming the policy and the fixes', async () => {
    const message = String(
      (await start(platform, appOf([], { scope: ['operation'], store: new RedisIdempotencyStore(lru.url) }))).failure,
    );
    expect(message).toContain(`redis://127.0.0.1:${lru.port} has maxmemory-policy 'allkeys-lru'`);
    expect(message).toContain("Set maxmemory-policy to 'noeviction'");
    expect(message).toContain("evictionPolicy: 'warn'");
  });

  it("with evictionPolicy: 'warn' it starts and says why it should not", async () => {
    const store = new RedisIdempotencyStore(lru.url, { evictionPolicy: 'warn' });
    const { failure, logger } = await start(platform, appOf([], { scope: ['operation'], store }));
    expect(failure).toBeUndefined();
    expect(logger.at('warn').join('\n')).toContain("has maxmemory-policy 'allkeys-lru': when its memory is full");
  });
});
