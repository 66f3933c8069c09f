import { Injectable, Module } from '@nestjs/common';
import { ConfigService, getConfigToken } from '@nestjs/config';
import { Test } from '@nestjs/testing';
import { loadOrdersConfig } from './orders-config.module.js';
import { InjectOrdersConfig, type OrdersConfig } from './orders.config.js';
import { OrdersConfigError } from './orders.environment.js';

@Injectable()
class AdminReader {
  constructor(@InjectOrdersConfig('admin') readonly admin: OrdersConfig['admin']) {}
}

/** A feature module that imports nothing: the configuration is global. */
@Module({ providers: [AdminReader], exports: [AdminReader] })
class FeatureModule {}

async function compile(variables: Record<string, string>) {
  const { module, config } = await loadOrdersConfig(variables);
  const moduleRef = await Test.createTestingModule({ imports: [module, FeatureModule] }).compile();
  return { moduleRef, config, service: moduleRef.get<ConfigService<OrdersConfig, true>>(ConfigService) };
}

describe('loadOrdersConfig (the ConfigModule of the service)', () => {
  it('serves the validated namespaces through ConfigService and through their registerAs tokens', async () => {
    const token = 'adm_0123456789abcdef0123456789abcdef';
    const { moduleRef, config, service } = await compile({ PORT: '8081', ADMIN_TOKEN: token, QUEUE_PREFIX: 'q1' });
    expect(service.get('http', { infer: true })).toEqual({ port: 8081, host: '0.0.0.0' });
    expect(service.get('queue.prefix', { infer: true })).toBe('q1');
    for (const namespace of Object.keys(config) as (keyof OrdersConfig)[]) {
      expect(moduleRef.get(getConfigToken(namespace))).toEqual(config[namespace]);
    }
    expect(moduleRef.get(AdminReader).admin).toEqual({ token });
    await moduleRef.close();
  });

  it('reads only the object it is given, and writes nothing to process.env', async () => {
    const before = { ...process.env };
    // Jest sets NODE_ENV; the module must not see it (nor any other variable of this process).
    expect(process.env.NODE_ENV).toBe('test');
    const { moduleRef, service } = await compile({ DATA_DIR: '/tmp/orders-config-spec', LOG_LEVEL: 'warn' });
    expect(service.get('NODE_ENV' as never)).toBeUndefined();
    expect(service.get('database', { infer: true })).toEqual({
      kind: 'embedded',
      file: '/tmp/orders-config-spec/orders.sqlite',
    });
    expect(process.env).toEqual(before);
    await moduleRef.close();
  });

  it('builds independent modules from different objects in one process', async () => {
    const first = await compile({ OUTBOX_POLL_MS: '111' });
    const second = await compile({ OUTBOX_POLL_MS: '222' });
    expect(first.service.get('outbox.pollMs', { infer: true })).toBe(111);
    expect(second.service.get('outbox.pollMs', { infer: true })).toBe(222);
    await first.moduleRef.close();
    await second.moduleRef.close();
  });

  it('refuses a bad environment with every problem in one OrdersConfigError, secrets masked', async () => {
    const loading = loadOrdersConfig({ PORT: 'x', LOG_LEVEL: 'loud', REDIS_URL: 'http://user:hunter2@cache' });
    await expect(loading).rejects.toBeInstanceOf(OrdersConfigError);
    const error = (await loading.catch((e: unknown) => e)) as OrdersConfigError;
    expect(error.problems).toEqual([
      'PORT must be an integer from 0 to 65535 (got "x")',
      'REDIS_URL must be a redis:// or rediss:// URL (got "http://user:***@cache/")',
      'LOG_LEVEL must be one of fatal, error, warn, log, debug, verbose (got "loud")',
    ]);
    expect(error.message).not.toContain('hunter2');
  });
});
