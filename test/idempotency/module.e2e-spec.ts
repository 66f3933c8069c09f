import { Controller, Injectable, Module, Post } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import {
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
  type IdempotencyModuleOptions,
  type IdempotencyOptionsFactory,
} from 'nestjs-idempotency';
import { IdempotencyAdmin } from 'nestjs-idempotency/admin';
import { send } from '../support/http/send.js';

/** How applications register the module: forRoot, forRootAsync with @nestjs/config, useClass. */

@Controller()
class PingController {
  private runs = 0;
  @Post('ping')
  @Idempotent({ scope: ['operation'] })
  ping() {
    return { runs: ++this.runs };
  }
}

async function serve(module: unknown) {
  const app = await NestFactory.create(module as never, { rawBody: true, logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

describe('IdempotencyModule registration', () => {
  it('forRootAsync with @nestjs/config: options come from ConfigService', async () => {
    @Module({
      imports: [
        ConfigModule.forRoot({ ignoreEnvFile: true, load: [() => ({ IDEMPOTENCY_TTL_MS: '7200000' })] }),
        IdempotencyModule.forRootAsync({
          imports: [ConfigModule],
          inject: [ConfigService],
          useFactory: (config: ConfigService): IdempotencyModuleOptions => ({
            ttlMs: Number(config.getOrThrow<string>('IDEMPOTENCY_TTL_MS')),
            echoKey: false,
          }),
        }),
      ],
      controllers: [PingController],
    })
    class AppModule {}
    const { app, url } = await serve(AppModule);
    try {
      const key = randomUUID();
      const first = await send(url, '/ping', { key });
      const retry = await send(url, '/ping', { key });
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.json()).toEqual(first.json());
      expect(first.headers.get('idempotency-key')).toBeNull(); // echoKey from the factory
      const record = await app
        .get(IdempotencyService)
        .store.get(app.get(IdempotencyAdmin).keyIdOf({ operation: 'POST /ping', key, scope: ['operation'] }));
      expect(record!.expiresAtMs - record!.createdAtMs).toBe(7_200_000);
    } finally {
      await app.close();
    }
  });

  it('forRootAsync with useClass', async () => {
    @Injectable()
    class OptionsFactory implements IdempotencyOptionsFactory {
      createIdempotencyOptions(): IdempotencyModuleOptions {
        return { store: new MemoryIdempotencyStore(), replayHeader: { name: 'X-Replayed' } };
      }
    }
    @Module({ imports: [IdempotencyModule.forRootAsync({ useClass: OptionsFactory })], controllers: [PingController] })
    class AppModule {}
    const { app, url } = await serve(AppModule);
    try {
      const key = randomUUID();
      await send(url, '/ping', { key });
      expect((await send(url, '/ping', { key })).headers.get('x-replayed')).toBe('true');
    } finally {
      await app.close();
    }
  });

  it('anonymousScope: a caller without a tenant gets a bucket of its own, never the record of a tenant of the same name', async () => {
    @Controller()
    class TenantPingController {
      private runs = 0;
      @Post('ping')
      @Idempotent()
      ping() {
        return { runs: ++this.runs };
      }
    }
    @Module({
      imports: [
        IdempotencyModule.forRoot({
          scope: ['tenant', 'operation'],
          tenant: (req) => req.headers['x-tenant-id'] as string | undefined,
          anonymousScope: (req) => req.headers['x-device-id'] as string | undefined,
        }),
      ],
      controllers: [TenantPingController],
    })
    class AnonymousApp {}
    const { app, url } = await serve(AnonymousApp);
    try {
      const key = randomUUID();
      const asTenant = await send(url, '/ping', { key, headers: { 'x-tenant-id': 'anonymous:d1' } });
      const asDevice = await send(url, '/ping', { key, headers: { 'x-device-id': 'd1' } });
      const asDeviceAgain = await send(url, '/ping', { key, headers: { 'x-device-id': 'd1' } });
      expect(asTenant.status).toBe(201);
      expect(asDevice.status).toBe(201);
      expect(asDevice.headers.get('idempotent-replayed')).toBeNull();
      expect(asDevice.json()).not.toEqual(asTenant.json());
      expect(asDeviceAgain.headers.get('idempotent-replayed')).toBe('true');
      expect(asDeviceAgain.json()).toEqual(asDevice.json());
      expect((await send(url, '/ping', { key })).status).toBe(500); // neither: never a global namespace
    } finally {
      await app.close();
    }
  });

  it('a replay carries the CORS headers computed for its own Origin, not the stored ones', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({})], controllers: [PingController] })
    class CorsApp {}
    const app = await NestFactory.create(CorsApp, { rawBody: true, logger: false });
    app.enableCors({ origin: ['https://a.example', 'https://b.example'] });
    await app.listen(0, '127.0.0.1');
    const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    try {
      const key = randomUUID();
      const first = await send(url, '/ping', { key, headers: { Origin: 'https://a.example' } });
      const retry = await send(url, '/ping', { key, headers: { Origin: 'https://b.example' } });
      expect(first.headers.get('access-control-allow-origin')).toBe('https://a.example');
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.json()).toEqual(first.json());
      expect(retry.headers.get('access-control-allow-origin')).toBe('https://b.example');
    } finally {
      await app.close();
    }
  });

  it('a configuration that cannot keep the contract fails at startup with a clear error', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ ttlMs: 1000, leaseMs: 30_000 })], controllers: [PingController] })
    class BadTtl {}
    await expect(NestFactory.create(BadTtl, { logger: false, abortOnError: false })).rejects.toThrow(
      IdempotencyConfigurationError,
    );

    @Module({ imports: [IdempotencyModule.forRoot({ transactional: true })], controllers: [PingController] })
    class NoDurableStore {}
    await expect(NestFactory.create(NoDurableStore, { logger: false, abortOnError: false })).rejects.toThrow(
      /durableStore/,
    );
  });

  it('a route whose options cannot keep the contract stops the startup, naming the route', async () => {
    @Controller()
    class ShortTtlController {
      @Post('short')
      @Idempotent({ ttlMs: 1000 })
      short() {
        return {};
      }
    }
    @Module({
      imports: [IdempotencyModule.forRoot({ leaseMs: 30_000 })],
      controllers: [PingController, ShortTtlController],
    })
    class BadRoute {}
    const app = await NestFactory.create(BadRoute, { logger: false, abortOnError: false });
    try {
      // init() runs before listen(): the application never serves a request.
      const started = app.init();
      await expect(started).rejects.toThrow(IdempotencyConfigurationError);
      await expect(started).rejects.toThrow(/ShortTtlController\.short \(POST \/short\): .*ttlMs/);
    } finally {
      await app.close();
    }
  });
});
