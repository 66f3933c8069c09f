// The sources of the starter apps (starters.mjs): an idempotent orders route, its module, a unit
// spec and an e2e spec, as a user would write them. `ext` is what relative imports end with
// ('' in the CommonJS apps, '.js' in the ESM one).

/** The orders controller every starter declares: the README's example route. */
export const ORDERS_CONTROLLER = (suffix) => `import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency';

@Controller('orders')
export class OrdersController {
  private created = 0;

  @Post()
  @Idempotent({ required: true })
  create(@Body() order: { sku: string; quantity: number }): { id: number; sku: string; quantity: number } {
    this.created += 1;
    return { id: this.created, ...order };
  }
}
${suffix}`;

export const APP_MODULE = (ext) => `import { Module } from '@nestjs/common';
import { IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { OrdersController } from './orders.controller${ext}';

// A subpath entry point too: with "module": "commonjs" (node10) its types come from typesVersions.
const store = process.env.REDIS_URL ? new RedisIdempotencyStore(process.env.REDIS_URL) : new MemoryIdempotencyStore();

@Module({
  imports: [IdempotencyModule.forRoot({ store, scope: ['operation'] })],
  controllers: [OrdersController],
})
export class AppModule {}
`;

/** A unit spec: the library's store contract on the memory store, no Nest involved. */
export const UNIT_SPEC = (ext) => `import { MemoryIdempotencyStore } from 'nestjs-idempotency';
import { OrdersController } from './orders.controller${ext}';

describe('OrdersController', () => {
  it('runs on the Node.js the check asked for', () => {
    expect(process.version).toBe(process.env.EXPECTED_NODE_VERSION ?? process.version);
  });

  it('returns the order it created', () => {
    expect(new OrdersController().create({ sku: 'book', quantity: 1 })).toEqual({ id: 1, sku: 'book', quantity: 1 });
  });

  it('claims a key once in the memory store', async () => {
    const store = new MemoryIdempotencyStore();
    const request = { fingerprint: 'f', ownerToken: 't1', leaseMs: 1000, ttlMs: 1000 };
    const first = await store.claim('k', request);
    const second = await store.claim('k', { ...request, ownerToken: 't2' });
    expect([first.kind, second.kind]).toEqual(['claimed', 'existing']);
    store.onApplicationShutdown();
  });
});
`;

/** The e2e spec: the route over a real socket (supertest), first answer, replay, other payload. */
export const E2E_SPEC = (ext, supertestImport) => `import { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
${supertestImport}
import { IDEMPOTENT_REPLAYED_HEADER } from 'nestjs-idempotency';
import { AppModule } from '../src/app.module${ext}';

describe('POST /orders (e2e)', () => {
  let app: INestApplication;

  beforeEach(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication({ rawBody: true });
    await app.init();
  });

  afterEach(async () => {
    await app.close();
  });

  it('answers a retry with the stored answer and refuses the key for another payload', async () => {
    const key = 'a7f3c2d8-1b7e-4f43-9a59-3d8a1e0c5b21';
    const first = await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send({ sku: 'book', quantity: 1 });
    expect(first.status).toBe(201);
    const retry = await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send({ sku: 'book', quantity: 1 });
    expect(retry.status).toBe(201);
    expect(retry.headers[IDEMPOTENT_REPLAYED_HEADER.toLowerCase()]).toBe('true');
    expect(retry.body).toEqual(first.body);
    const other = await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send({ sku: 'book', quantity: 2 });
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('idempotency_key_reused');
  });

  it('refuses a request without a key (required: true)', async () => {
    const missing = await request(app.getHttpServer()).post('/orders').send({ sku: 'book', quantity: 1 });
    expect(missing.status).toBe(400);
    expect(missing.headers['content-type']).toContain('application/problem+json');
  });
});
`;

export const MAIN_TS = (ext) => `import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module${ext}';

async function bootstrap(): Promise<void> {
  const app = await NestFactory.create(AppModule, { rawBody: true });
  await app.listen(process.env.PORT ?? 3000);
}
void bootstrap();
`;
