import { Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { IdempotencyAdmin } from './admin/idempotency-admin.service.js';
import { apiDocsProvider } from './decorators/idempotency-api-docs.js';
import { ConsumerSettlements } from './consumers/consumer-settlements.js';
import { IdempotencyService } from './engine/idempotency.service.js';
import { IdempotencyReaper } from './maintenance/idempotency-reaper.js';
import { IdempotencyProblemFilter } from './http/problem-details.filter.js';
import { IdempotencyModuleBase } from './idempotency.module-definition.js';
import { durableStoreProvider, settingsProvider, storeProvider } from './idempotency.providers.js';
import { IDEMPOTENCY_SETTINGS } from './idempotency.tokens.js';
import { IdempotencyInterceptor } from './http/idempotency.interceptor.js';
import { IdempotentRoutesValidator } from './idempotent-routes.validator.js';
import { IdempotencyStartupReport } from './idempotency-startup.report.js';
import { IdempotencyContextAccessor } from './context/idempotency-context.accessor.js';
import { IdempotencyTelemetry } from './telemetry/idempotency-telemetry.js';
import { DurableIdempotencyStore } from './stores/durable-idempotency-store.js';
import { IdempotencyStore } from './stores/idempotency-store.js';

/**
 * Makes handlers safe to retry. Register it once with `forRoot()` or `forRootAsync()`, then mark
 * routes with `@Idempotent()`, or pass `protectAllRoutes: true` to protect every POST and PATCH
 * route (`@SkipIdempotency()` opts one out). At startup it logs one line naming the store, the
 * durable store, the scope and the policy in use.
 *
 * @example
 * IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(process.env.REDIS_URL!), tenant: fromHeader('x-tenant-id') })
 * @publicApi
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    settingsProvider,
    storeProvider,
    durableStoreProvider,
    IdempotencyService,
    IdempotencyReaper,
    IdempotencyInterceptor,
    IdempotencyProblemFilter,
    IdempotencyTelemetry,
    IdempotentRoutesValidator,
    IdempotencyStartupReport,
    IdempotencyContextAccessor,
    ConsumerSettlements,
    IdempotencyAdmin,
    apiDocsProvider,
  ],
  exports: [
    IDEMPOTENCY_SETTINGS,
    IdempotencyStore,
    DurableIdempotencyStore,
    IdempotencyService,
    IdempotencyReaper,
    IdempotencyInterceptor,
    IdempotencyProblemFilter,
    IdempotencyTelemetry,
    IdempotencyAdmin,
    IdempotencyContextAccessor,
    ConsumerSettlements,
  ],
})
export class IdempotencyModule extends IdempotencyModuleBase {}
