// The consumer applications of the pack-and-consume check (test/package/pack-and-consume.mjs):
// brand-new Nest apps, written from scratch into a temp folder, that install the packed tarball
// the way the README says and use it the way its example does.

/**
 * The README's install commands, with the tarball in place of the package name: the default one
 * (ioredis 6), and the one for apps that also use TypeORM (typeorm 1.1 peers on ioredis ^5).
 */
export const README_INSTALLS = {
  default: ['nestjs-idempotency', 'ioredis'],
  withTypeorm: ['nestjs-idempotency', 'ioredis@5', 'typeorm'],
};

/**
 * Each consumer: its module system, the Nest major it is built on, and the README command it runs.
 * The Nest 11 apps and the Nest 12 starter are in starters.mjs, with their own test runners.
 */
export const CONSUMERS = [
  { name: 'nest12-esm', moduleType: 'module', nest: '^12.0.0', install: README_INSTALLS.default },
  { name: 'nest12-cjs-typeorm', moduleType: 'commonjs', nest: '^12.0.0', install: README_INSTALLS.withTypeorm },
];

/** package.json of a consumer before the README's install command runs. */
export function consumerPackageJson(consumer) {
  return {
    name: consumer.name,
    private: true,
    type: consumer.moduleType,
    scripts: { build: 'tsc -p tsconfig.json' },
    dependencies: {
      '@nestjs/common': consumer.nest,
      '@nestjs/core': consumer.nest,
      '@nestjs/platform-express': consumer.nest,
      'reflect-metadata': '^0.2.2',
      rxjs: '^7.8.1',
    },
    devDependencies: { typescript: '6.0.3', '@types/node': '^20.19.0' },
  };
}

/** A strict tsconfig as `nest new` writes one, with the declarations of every package checked. */
export const CONSUMER_TSCONFIG = {
  compilerOptions: {
    module: 'nodenext',
    moduleResolution: 'nodenext',
    target: 'es2023',
    lib: ['es2023'],
    types: ['node'],
    strict: true,
    experimentalDecorators: true,
    emitDecoratorMetadata: true,
    useDefineForClassFields: false,
    skipLibCheck: false,
    outDir: './dist',
    rootDir: './src',
  },
  include: ['src/**/*.ts'],
};

/**
 * The app: the README's example (one idempotent route), on the memory store, or on Redis under a
 * key prefix of its own when REDIS_URL is set. The same source compiles to ESM or CommonJS.
 */
export const CONSUMER_MAIN_TS = `import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, type IdempotencyStore } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';

interface CreateOrder {
  sku: string;
  quantity: number;
}

@Controller('orders')
class OrdersController {
  private created = 0;

  @Post()
  @Idempotent({ required: true })
  create(@Body() order: CreateOrder): { id: number; sku: string; quantity: number } {
    this.created += 1;
    return { id: this.created, ...order };
  }
}

const store: IdempotencyStore = process.env.REDIS_URL
  ? new RedisIdempotencyStore(process.env.REDIS_URL, { prefix: process.env.REDIS_PREFIX })
  : new MemoryIdempotencyStore();

@Module({
  // A single-tenant API without users: a key is unique per operation (route).
  imports: [IdempotencyModule.forRoot({ store, scope: ['operation'] })],
  controllers: [OrdersController],
})
class AppModule {}

async function main(): Promise<void> {
  const app = await NestFactory.create(AppModule, { rawBody: true, logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  console.log(\`listening on \${await app.getUrl()}\`);
}

void main();
`;

/**
 * Type-checked (not run) in the app that installs TypeORM: the entry points whose declarations
 * name TypeORM or nothing beyond Nest, compiled against the real peers with skipLibCheck off.
 */
export const TYPEORM_CONSUMER_ENTRY_POINTS_TS = `import { IdempotencyAdmin } from 'nestjs-idempotency/admin';
import { withIdempotency, type IdempotentCallOutcome } from 'nestjs-idempotency/client';
import { IDEMPOTENCY_DIAGNOSTICS_CHANNELS, IDEMPOTENCY_METRICS } from 'nestjs-idempotency/telemetry';
import { IDEMPOTENCY_TYPEORM_MIGRATIONS, TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { DataSource } from 'typeorm';

export const store = new TypeOrmIdempotencyStore(new DataSource({ type: 'postgres', migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS }));
export const keyedFetch = withIdempotency(fetch, { maxAttempts: 3 });
export type Outcome = IdempotentCallOutcome;
export const names = [IDEMPOTENCY_METRICS.claims, IDEMPOTENCY_DIAGNOSTICS_CHANNELS.claim, IdempotencyAdmin.name];
`;
