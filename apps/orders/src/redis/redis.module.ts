import { type DynamicModule, Inject, Logger, Module, type OnApplicationShutdown, Optional } from '@nestjs/common';
import { REDIS_FAIL_FAST_OPTIONS } from 'nestjs-idempotency/redis';
import { Redis } from 'ioredis';
import type { FastStoreConfig } from '../config/orders.config.js';
import { redactUrl } from '../config/redact-url.js';
import { REDIS_CLIENT } from './redis.constants.js';

const logger = new Logger('Redis');

/**
 * With the idempotency store's fail-fast options: with Redis down or silent, callers (the health
 * check, the idempotency store) get an error within two seconds instead of waiting for ever, and
 * a write whose fate is unknown is never sent twice.
 */
function createRedisClient(url: string): Redis {
  const client = new Redis(url, REDIS_FAIL_FAST_OPTIONS);
  let lastError: string | undefined;
  client.on('ready', () => {
    lastError = undefined;
    logger.log(`Connected to ${redactUrl(url)}`);
  });
  client.on('error', (error: Error) => {
    // Logged once per distinct error, not once per reconnection attempt.
    if (error.message !== lastError) {
      lastError = error.message;
      logger.warn(`${redactUrl(url)}: ${error.message}`);
    }
  });
  return client;
}

/**
 * Provides `REDIS_CLIENT` when Redis is configured, and nothing otherwise. The app does not
 * wait for Redis at startup: a Redis that is down shows in `/health` (503), and the idempotency
 * layer decides per route what to do without it.
 */
@Module({})
export class RedisModule implements OnApplicationShutdown {
  constructor(@Optional() @Inject(REDIS_CLIENT) private readonly client?: Redis) {}

  static forRoot(fastStore: FastStoreConfig): DynamicModule {
    const providers =
      fastStore.kind === 'redis' ? [{ provide: REDIS_CLIENT, useFactory: () => createRedisClient(fastStore.url) }] : [];
    return { module: RedisModule, global: true, providers, exports: providers.map((p) => p.provide) };
  }

  async onApplicationShutdown(): Promise<void> {
    if (!this.client) {
      return;
    }
    if (this.client.status === 'ready') {
      await this.client.quit().catch(() => this.client?.disconnect());
    } else {
      this.client.disconnect();
    }
  }
}
