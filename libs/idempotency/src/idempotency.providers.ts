import type { Provider } from '@nestjs/common';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition.js';
import { resolveModuleSettings, resolvePolicy } from './idempotency.options.js';
import { IDEMPOTENCY_PROTECT_ALL_ROUTES, IDEMPOTENCY_SETTINGS } from './idempotency.tokens.js';
import { IdempotencyConfigurationError } from './errors/idempotency-configuration.error.js';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-module-options.interface.js';
import { DurableIdempotencyStore } from './stores/durable-idempotency-store.js';
import { IdempotencyStore } from './stores/idempotency-store.js';
import { MemoryIdempotencyStore } from './stores/memory-idempotency.store.js';

/**
 * The fast tier: the store from the options, or an in-memory store (one process only: for tests
 * and single-instance development, docs/contract.md B.10 rule 31). The memory store is created here, so
 * the module owns it and Nest runs its shutdown hook.
 */
export const storeProvider: Provider = {
  provide: IdempotencyStore,
  inject: [IDEMPOTENCY_MODULE_OPTIONS],
  useFactory: (options: IdempotencyModuleOptions) => options.store ?? new MemoryIdempotencyStore(),
};

/** The durable tier, or null when the module has none (only `durable` routes need it). */
export const durableStoreProvider: Provider = {
  provide: DurableIdempotencyStore,
  inject: [IDEMPOTENCY_MODULE_OPTIONS],
  useFactory: (options: IdempotencyModuleOptions) => options.durableStore ?? null,
};

/**
 * Module-wide settings with their defaults applied once. Also checks the module's policy, so a
 * bad configuration fails at startup rather than on the first request.
 */
export const settingsProvider: Provider = {
  provide: IDEMPOTENCY_SETTINGS,
  inject: [IDEMPOTENCY_MODULE_OPTIONS, { token: IDEMPOTENCY_PROTECT_ALL_ROUTES, optional: true }],
  useFactory: (options: IdempotencyModuleOptions, protectAllRoutes?: boolean) => {
    const policy = resolvePolicy(options);
    if (policy.durable && !options.durableStore) {
      throw new IdempotencyConfigurationError('`durable` and `transactional` need a `durableStore`.');
    }
    return resolveModuleSettings(options, protectAllRoutes === true);
  },
};
