import {
  Body,
  Controller,
  Get,
  Injectable,
  Module,
  Post,
  SetMetadata,
  UseFilters,
  type ExecutionContext,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import {
  createIdempotentDecorator,
  fromHeader,
  Idempotent,
  IdempotencyContext,
  IdempotencyContextAccessor,
  IdempotencyContextRef,
  IdempotencyInterceptor,
  IdempotencyModule,
  IdempotencyProblemFilter,
  IdempotencyService,
  SkipIdempotency,
  type IdempotencyModuleOptions,
  type IdempotencyProblemKind,
  type IdempotencyProblemOptions,
} from 'nestjs-idempotency';
import { send } from '../support/http/send.js';

/**
 * The first hour (issue 26), served: the global mode and `@SkipIdempotency()`, the interceptor
 * bound twice on a route (issue 22 item 6: made harmless, or refused at startup in
 * first-hour-startup.e2e-spec.ts), typed resolvers that get the `ExecutionContext`, the context
 * in services, and `run()` errors answered as problems. On Express and Fastify, real sockets.
 */

type Platform = 'express' | 'fastify';

async function serve(platform: Platform, module: Type): Promise<{ app: INestApplication; url: string }> {
  const options = { rawBody: true, logger: false as const };
  const app =
    platform === 'express'
      ? await NestFactory.create(module, options)
      : await NestFactory.create(module, new FastifyAdapter(), options);
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

/** Runs of each handler, by name. */
const runs = new Map<string, number>();
const ran = (name: string) => {
  runs.set(name, (runs.get(name) ?? 0) + 1);
  return { name, run: runs.get(name) };
};

@Injectable()
class BrandedInterceptor extends IdempotencyInterceptor {
  protected override createProblem(kind: IdempotencyProblemKind, options?: IdempotencyProblemOptions) {
    const exception = super.createProblem(kind, options);
    exception.problem.brand = 'acme';
    return exception;
  }
}
const BrandedIdempotent = createIdempotentDecorator(BrandedInterceptor);

@Injectable()
class PaymentsClient {
  constructor(private readonly idempotency: IdempotencyContextAccessor) {}
  /** What a service deep in the call chain sees, without a parameter. */
  providerKey(): string | undefined {
    return this.idempotency.get()?.derivedKey('charge');
  }
}

@Controller('carts')
class CartsController {
  constructor(
    private readonly payments: PaymentsClient,
    private readonly idempotency: IdempotencyService,
  ) {}

  @Post('checkout')
  checkout() {
    return ran('checkout');
  }
  @Post('search')
  @SkipIdempotency()
  search() {
    return ran('search');
  }
  @Get()
  list() {
    return ran('list');
  }
  @Post('strict')
  @Idempotent({ required: true })
  strict() {
    return ran('strict');
  }
  @Post('branded')
  @BrandedIdempotent({ required: true })
  branded() {
    return ran('branded');
  }
  @Post('pay')
  pay(@IdempotencyContext() idem?: IdempotencyContextRef) {
    return { fromHandler: idem?.derivedKey('charge') ?? null, fromService: this.payments.providerKey() ?? null };
  }
  @Post('run')
  @SkipIdempotency()
  async runInRun(@Body() body: { key: string; amount: number }) {
    const { value } = await this.idempotency.run(
      { operation: 'carts.run', key: body.key, fingerprint: String(body.amount) },
      (context) => ({ same: this.payments.providerKey() === context.derivedKey('charge'), amount: body.amount }),
    );
    return value;
  }
}

/** The global mode, with a tenant from a header (and no authentication: no principal in the scope). */
function globalApp(): Type {
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        tenant: fromHeader('x-tenant-id'),
        scope: ['tenant', 'operation'],
        protectAllRoutes: true,
      }),
    ],
    controllers: [CartsController],
    providers: [PaymentsClient],
  })
  class GlobalModule {}
  return GlobalModule;
}

const tenant = (id: string) => ({ 'x-tenant-id': id });

describe.each<Platform>(['express', 'fastify'])('global mode (%s)', (platform) => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => ({ app, url } = await serve(platform, globalApp())));
  afterAll(() => app.close());
  beforeEach(() => runs.clear());

  it('protects an undecorated POST route: a retry replays', async () => {
    const key = randomUUID();
    const first = await send(url, '/carts/checkout', { key, headers: tenant('t1') });
    const retry = await send(url, '/carts/checkout', { key, headers: tenant('t1') });
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.json()).toEqual(first.json());
    expect(runs.get('checkout')).toBe(1);
  });

  it('fromHeader() scopes keys by tenant: the same key from another tenant is another request', async () => {
    const key = randomUUID();
    await send(url, '/carts/checkout', { key, headers: tenant('t1') });
    const other = await send(url, '/carts/checkout', { key, headers: tenant('t2') });
    expect(other.headers.get('idempotent-replayed')).toBeNull();
    expect(runs.get('checkout')).toBe(2);
  });

  it('@SkipIdempotency() opts a route out, and a GET passes untouched', async () => {
    const key = randomUUID();
    await send(url, '/carts/search', { key, headers: tenant('t1') });
    const again = await send(url, '/carts/search', { key, headers: tenant('t1') });
    const list = await send(url, '/carts', { method: 'GET', key, headers: tenant('t1') });
    expect(again.headers.get('idempotency-key')).toBeNull();
    expect(list.headers.get('idempotency-key')).toBeNull();
    expect([runs.get('search'), runs.get('list')]).toEqual([2, 1]);
  });

  it("a route's own @Idempotent({...}) decides on its route", async () => {
    const missing = await send(url, '/carts/strict', { headers: tenant('t1') });
    expect(missing.status).toBe(400);
    expect(missing.json().code).toBe('idempotency_key_missing');
    expect(runs.get('strict')).toBeUndefined();
  });

  it("a route's own subclass takes over from the global interceptor, and claims the key once", async () => {
    const missing = await send(url, '/carts/branded', { headers: tenant('t1') });
    expect(missing.json()).toMatchObject({ code: 'idempotency_key_missing', brand: 'acme' });
    const key = randomUUID();
    const first = await send(url, '/carts/branded', { key, headers: tenant('t1') });
    const retry = await send(url, '/carts/branded', { key, headers: tenant('t1') });
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(runs.get('branded')).toBe(1);
  });

  it('services reach the request context through IdempotencyContextAccessor', async () => {
    const key = randomUUID();
    const withKey = (await send(url, '/carts/pay', { key, headers: tenant('t1') })).json();
    expect(withKey.fromService).toEqual(expect.any(String));
    expect(withKey.fromService).toBe(withKey.fromHandler);
    const withoutKey = (await send(url, '/carts/pay', { headers: tenant('t1') })).json();
    expect(withoutKey).toEqual({ fromHandler: null, fromService: null });
  });

  it('inside IdempotencyService.run() the accessor returns the run’s context', async () => {
    const answer = await send(url, '/carts/run', { body: { key: randomUUID(), amount: 5 }, headers: tenant('t1') });
    expect(answer.json()).toEqual({ same: true, amount: 5 });
  });
});

describe.each<Platform>(['express', 'fastify'])('the interceptor bound twice on a route (%s)', (platform) => {
  @Controller('orders')
  @Idempotent({ scope: ['operation'] })
  class OrdersController {
    @Post()
    @Idempotent({ scope: ['operation'], operation: 'orders.create' })
    create() {
      return ran('create');
    }
  }

  it.each<[string, Type]>([
    [
      'an application APP_INTERCEPTOR plus @Idempotent()',
      (() => {
        @Module({
          imports: [IdempotencyModule.forRoot({})],
          controllers: [OrdersController],
          providers: [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }],
        })
        class TwiceModule {}
        return TwiceModule;
      })(),
    ],
    [
      '@Idempotent() on the controller and on the handler',
      (() => {
        @Module({ imports: [IdempotencyModule.forRoot({})], controllers: [OrdersController] })
        class ControllerAndHandlerModule {}
        return ControllerAndHandlerModule;
      })(),
    ],
  ])('%s: the handler runs once, and the retry replays (no 409 to itself)', async (_case, module) => {
    runs.clear();
    const { app, url } = await serve(platform, module);
    try {
      const key = randomUUID();
      const first = await send(url, '/orders', { key });
      const retry = await send(url, '/orders', { key });
      expect([first.status, retry.status]).toEqual([201, 201]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.json()).toEqual(first.json());
      expect(runs.get('create')).toBe(1);
    } finally {
      await app.close();
    }
  });
});

describe.each<Platform>(['express', 'fastify'])('resolvers and run() errors (%s)', (platform) => {
  const TENANT_FROM = 'test:tenant-from';

  @Controller('transfers')
  @UseFilters(IdempotencyProblemFilter)
  class TransfersController {
    constructor(private readonly idempotency: IdempotencyService) {}

    @Post()
    @Idempotent()
    @SetMetadata(TENANT_FROM, 'x-account')
    create() {
      return ran('transfer');
    }

    @Post('manual')
    async manual(@Body() body: { key: string; amount: number; hold?: boolean }) {
      const { value } = await this.idempotency.run(
        { operation: 'transfers.manual', key: body.key, fingerprint: String(body.amount) },
        async () => {
          if (body.hold) {
            held.started();
            await held.released;
          }
          return { amount: body.amount };
        },
      );
      return value;
    }
  }

  /** A run the test holds open: it says when it started, and finishes when the test lets it. */
  const held = { started: () => {}, released: Promise.resolve(), release: () => {} };
  const seen: string[] = [];
  const options: IdempotencyModuleOptions = {
    scope: ['tenant', 'operation'],
    // Reads the handler's metadata through the ExecutionContext, as throttler's getTracker does.
    tenant: (request, context: ExecutionContext) => {
      seen.push(`${context.getClass().name}.${context.getHandler().name}`);
      const header = Reflect.getMetadata(TENANT_FROM, context.getHandler()) as string;
      return fromHeader(header)(request, context);
    },
  };
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    @Module({ imports: [IdempotencyModule.forRoot(options)], controllers: [TransfersController] })
    class TransfersModule {}
    ({ app, url } = await serve(platform, TransfersModule));
  });
  afterAll(() => app.close());

  it("a resolver receives the route's ExecutionContext", async () => {
    const key = randomUUID();
    await send(url, '/transfers', { key, headers: { 'x-account': 'acc-1' } });
    const retry = await send(url, '/transfers', { key, headers: { 'x-account': 'acc-1' } });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(seen).toContain('TransfersController.create');
  });

  it('run() called from a controller: a reused key is the 422 problem, not a bare 500', async () => {
    const key = randomUUID();
    expect((await send(url, '/transfers/manual', { body: { key, amount: 1 } })).json()).toEqual({ amount: 1 });
    const reused = await send(url, '/transfers/manual', { body: { key, amount: 2 } });
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toContain('application/problem+json');
    expect(reused.json()).toMatchObject({ code: 'idempotency_key_reused', status: 422 });
  });

  it('run() called from a controller: a run in progress is the 409 problem with Retry-After', async () => {
    const key = randomUUID();
    const started = new Promise<void>((resolve) => (held.started = resolve));
    held.released = new Promise<void>((resolve) => (held.release = resolve));
    const slow = send(url, '/transfers/manual', { body: { key, amount: 1, hold: true } });
    await started;
    const busy = await send(url, '/transfers/manual', { body: { key, amount: 1 } });
    held.release();
    expect(busy.status).toBe(409);
    expect(busy.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(busy.json()).toMatchObject({ code: 'idempotency_request_in_progress' });
    expect((await slow).json()).toEqual({ amount: 1 });
  });
});
