import type { DynamicModule } from '@nestjs/common';
import { ConfigModule, registerAs } from '@nestjs/config';
import { ORDERS_CONFIG_NAMESPACES, type OrdersConfig, validateOrdersEnvironment } from './orders.config.js';
import type { EnvironmentVariables } from './orders.environment.js';

/** The global `ConfigModule` of the service, and the configuration it validated. */
export interface LoadedOrdersConfig {
  module: DynamicModule;
  /** The same values the module provides; for what is decided before the app exists (log levels, optional modules). */
  config: OrdersConfig;
}

/**
 * `ConfigModule.forRoot` for the orders service: global, cached, validated by the class-validator
 * schema in `validate` (every bad variable listed in one `OrdersConfigError`), and exposing
 * each namespace of {@link OrdersConfig} through `registerAs`.
 *
 * It reads `process.env`, or only `variables` when given (tests, the worker), and never a `.env`
 * file: what a process runs on is its environment, nothing else. It never writes to `process.env`
 * either, since every value `validate` returns is a namespace object.
 *
 * @example
 * const { module, config } = await loadOrdersConfig({ DATA_DIR: '/tmp/orders' });
 * Test.createTestingModule({ imports: [module, ...] });
 */
export async function loadOrdersConfig(variables?: EnvironmentVariables): Promise<LoadedOrdersConfig> {
  let validated: OrdersConfig | undefined;
  const module = await ConfigModule.forRoot({
    isGlobal: true,
    cache: true,
    ignoreEnvFile: true,
    // With `variables`, process.env is neither validated nor read by ConfigService.
    validatePredefined: variables === undefined,
    skipProcessEnv: true,
    validate: (environment) => (validated = validateOrdersEnvironment(variables ?? environment)),
    load: ORDERS_CONFIG_NAMESPACES.map((namespace) => registerAs(namespace, () => validated![namespace])),
  });
  return { module, config: validated! };
}
