import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { GlobalIdempotencyInterceptor } from './http/global-idempotency.interceptor.js';
import { IdempotencyInterceptor } from './http/idempotency.interceptor.js';
import { IDEMPOTENCY_PROTECT_ALL_ROUTES } from './idempotency.tokens.js';
import type { IdempotencyModuleOptions } from './interfaces/idempotency-module-options.interface.js';

/**
 * Options of `forRoot()` and `forRootAsync()` that shape the module itself, so they are given
 * beside the options (never returned by `useFactory`).
 *
 * @publicApi
 */
export interface IdempotencyModuleExtras {
  /** The module is global: `@Idempotent()` attaches the interceptor in the controller's module. @default true */
  isGlobal?: boolean;
  /**
   * Global mode: protect every route whose method is in `methods` (POST and PATCH by default),
   * as if each carried `@Idempotent()`; `@SkipIdempotency()` opts a route or a controller out,
   * and a route's own `@Idempotent({...})` (or a `createIdempotentDecorator()` subclass) takes
   * over on that route. @default false
   */
  protectAllRoutes?: boolean;
}

/**
 * `forRoot(options)` / `forRootAsync({ imports, inject, useFactory | useClass | useExisting })`,
 * global by default: `@Idempotent()` attaches the interceptor inside the controller's module, so
 * the engine must be visible there. Pass `isGlobal: false` to import the module where needed,
 * and `protectAllRoutes: true` for the global mode.
 */
export const {
  ConfigurableModuleClass: IdempotencyModuleBase,
  MODULE_OPTIONS_TOKEN: IDEMPOTENCY_MODULE_OPTIONS,
  OPTIONS_TYPE: IDEMPOTENCY_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: IDEMPOTENCY_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ moduleName: 'Idempotency' })
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createIdempotencyOptions')
  .setExtras<IdempotencyModuleExtras>({ isGlobal: true, protectAllRoutes: false }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
    providers: [...(definition.providers ?? []), ...globalModeProviders(extras.protectAllRoutes === true)],
  }))
  .build();

function globalModeProviders(protectAllRoutes: boolean): Provider[] {
  const mode: Provider = { provide: IDEMPOTENCY_PROTECT_ALL_ROUTES, useValue: protectAllRoutes };
  if (!protectAllRoutes) return [mode];
  return [
    mode,
    {
      provide: APP_INTERCEPTOR,
      inject: [IdempotencyInterceptor],
      useFactory: (interceptor: IdempotencyInterceptor) => new GlobalIdempotencyInterceptor(interceptor),
    },
  ];
}

/**
 * Implemented by a class passed as `forRootAsync({ useClass })`.
 *
 * @publicApi
 */
export interface IdempotencyOptionsFactory {
  createIdempotencyOptions(): IdempotencyModuleOptions | Promise<IdempotencyModuleOptions>;
}
