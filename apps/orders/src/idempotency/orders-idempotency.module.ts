import { Module } from '@nestjs/common';
import { IdempotencyModule, MemoryIdempotencyStore } from '@app/idempotency';
import { RedisIdempotencyStore } from '@app/idempotency/redis';
import type { Redis } from 'ioredis';
import { ORDERS_CONFIG, type OrdersConfig } from '../config/orders.config.js';
import { REDIS_CLIENT } from '../redis/redis.constants.js';

/** Set by `TenantGuard` (which runs before interceptors) from a valid `X-Tenant-ID`. */
interface TenantRequest {
  tenantId?: string;
}

/**
 * The idempotency layer of the orders service: Redis when `REDIS_URL` is set (on the app's own
 * client, which the app closes), the in-memory store otherwise. Keys are scoped per tenant and
 * operation: the sample has no authentication, so there is no principal to scope by.
 */
@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      inject: [ORDERS_CONFIG, { token: REDIS_CLIENT, optional: true }],
      useFactory: (config: OrdersConfig, redis?: Redis) => ({
        store: redis ? new RedisIdempotencyStore(redis) : new MemoryIdempotencyStore(),
        tenant: (request) => (request as TenantRequest).tenantId,
        scope: ['tenant', 'operation'],
        problemTypeBaseUri: config.problemTypeBaseUri,
      }),
    }),
  ],
})
export class OrdersIdempotencyModule {}
