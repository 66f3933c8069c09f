import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-module-options.interface.js';

/**
 * `forRoot(options)` / `forRootAsync({ imports, inject, useFactory | useClass | useExisting })`,
 * global by default: `@Idempotent()` attaches the interceptor inside the controller's module, so
 * the engine must be visible there. Pass `isGlobal: false` to import the module where needed.
 */
export const {
  ConfigurableModuleClass: IdempotencyModuleBase,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE: IDEMPOTENCY_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ moduleName: 'Idempotency' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createIdempotencyOptions')
  .setExtras({ isGlobal: true }, (definition, extras) => ({ ...definition, global: extras.isGlobal }))
  .build();

/**
 * Implemented by a class passed as `forRootAsync({ useClass })`.
 *
 * @publicApi
 */
export interface IdempotencyOptionsFactory {
  createIdempotencyOptions(): IdempotencyModuleOptions | Promise<IdempotencyModuleOptions>;
}
