import { TransactionHost } from '@nestjs-cls/transactional';
import { Module } from '@nestjs/common';
import { IdempotencyModule, MemoryIdempotencyStore } from 'nestjs-idempotency';
import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';
import { TypeOrmIdempotencyStore } from 'nestjs-idempotency/typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import { ConfigService } from '@nestjs/config';
import type { OrdersConfig } from '../config/orders.config.js';
import { TransactionRunner } from '../database/transaction-runner.js';
import { idempotencyTransactions } from '../database/transactions.js';
import { REDIS_CLIENT } from '../redis/redis.constants.js';

/** Set by `TenantGuard` (which runs before interceptors) from a valid `X-Tenant-ID`. */
interface TenantRequest {
  tenantId?: string;
}

/**
 * The idempotency layer of the orders service:
 * - fast tier: Redis when `REDIS_URL` is set (on the app's own client, which the app closes),
 *   the in-memory store otherwise;
 * - durable tier: the `idempotency_records` table in the service's own database (PostgreSQL or
 *   the embedded sql.js), through `TransactionRunner` so that on sql.js its statements never
 *   interleave with the service's transactions. A transactional route's transaction is handed to
 *   `TransactionHost` (`propagate`), so the services' writes join it.
 * Keys are scoped per tenant and operation: the sample has no authentication, so there is no
 * principal to scope by. Expired records are reaped every minute. Stored responses are sealed
 * with AES-256-GCM when `IDEMPOTENCY_ENCRYPTION_KEYS` is set.
 */
@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      inject: [
        ConfigService,
        getDataSourceToken(),
        TransactionRunner,
        TransactionHost,
        { token: REDIS_CLIENT, optional: true },
      ],
      useFactory: (
        config: ConfigService<OrdersConfig, true>,
        dataSource: DataSource,
        runner: TransactionRunner,
        txHost: TransactionHost,
        redis?: Redis,
      ) => {
        const { leaseMs, encryption } = config.get('idempotency', { infer: true });
        const database = config.get('database', { infer: true });
        const partitionMs = database.kind === 'postgres' ? database.idempotencyPartitionMs : undefined;
        return {
          store: redis ? new RedisIdempotencyStore(redis) : new MemoryIdempotencyStore(),
          durableStore: new TypeOrmIdempotencyStore(dataSource, {
            runExclusive: (work) => runner.exclusive(work),
            propagate: idempotencyTransactions.propagateTo(txHost),
            ...(partitionMs !== undefined && { partitioning: { partitionMs } }),
          }),
          reaper: { intervalMs: 60_000 },
          tenant: (request) => (request as TenantRequest).tenantId,
          scope: ['tenant', 'operation'],
          leaseMs,
          problemTypeBaseUri: config.get('problems.typeBaseUri', { infer: true }),
          encryption,
        };
      },
    }),
  ],
})
export class OrdersIdempotencyModule {}
