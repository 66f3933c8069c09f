import { type DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_PIPE } from '@nestjs/core';
import { AdminModule } from './admin/admin.module.js';
import { ProblemDetailsFilter } from './common/problem-details/problem-details.filter.js';
import { TenantGuard } from './common/tenant/tenant.guard.js';
import { OrdersValidationPipe } from './common/validation/validation.pipe.js';
import type { LoadedOrdersConfig } from './config/orders-config.module.js';
import { DatabaseModule } from './database/database.module.js';
import { HealthModule } from './health/health.module.js';
import { MetricsModule } from './metrics/metrics.module.js';
import { OrdersIdempotencyModule } from './idempotency/orders-idempotency.module.js';
import { OrdersModule } from './orders/orders.module.js';
import { PaymentsModule } from './payments/payments.module.js';
import { RedisModule } from './redis/redis.module.js';
import { WebhooksModule } from './webhooks/webhooks.module.js';

/**
 * The orders service, on the global `ConfigModule` that `loadOrdersConfig` built. Which backends
 * it uses is decided once, in that configuration: PostgreSQL or embedded sql.js, Redis or nothing.
 * The idempotency layer (`OrdersIdempotencyModule`) uses the same Redis client.
 */
@Module({})
export class AppModule {
  static forRoot({ module: configModule, config }: LoadedOrdersConfig): DynamicModule {
    return {
      module: AppModule,
      imports: [
        configModule,
        DatabaseModule,
        RedisModule.forRoot(config.fastStore),
        OrdersIdempotencyModule,
        HealthModule,
        MetricsModule,
        PaymentsModule,
        OrdersModule,
        WebhooksModule,
        // Opt-in: without ADMIN_TOKEN the admin routes do not exist (404).
        ...(config.admin.token !== undefined ? [AdminModule] : []),
      ],
      providers: [
        { provide: APP_FILTER, useClass: ProblemDetailsFilter },
        { provide: APP_GUARD, useClass: TenantGuard },
        { provide: APP_PIPE, useClass: OrdersValidationPipe },
      ],
    };
  }
}
