import { Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import type { Observable } from 'rxjs';
import { boundIdempotencyInterceptors } from './bound-interceptors.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { RouteMemo } from './route-memo.js';

/**
 * The global mode's interceptor (`IdempotencyModule.forRoot({ protectAllRoutes: true })`,
 * registered as `APP_INTERCEPTOR`): hands every HTTP request to the module's
 * `IdempotencyInterceptor`, which protects each route in `methods` unless `@SkipIdempotency()`.
 * A route that binds an idempotency interceptor of its own (`@Idempotent()`, a subclass through
 * `createIdempotentDecorator()`) is left to it, so its hooks and options decide and the key is
 * claimed once.
 */
@Injectable()
export class GlobalIdempotencyInterceptor implements NestInterceptor {
  private readonly bindsItsOwn = new RouteMemo<boolean>();
  private readonly bindsInterceptor = (context: ExecutionContext) =>
    boundIdempotencyInterceptors(context.getHandler(), context.getClass()).length > 0;

  constructor(private readonly interceptor: IdempotencyInterceptor) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> | Promise<Observable<unknown>> {
    if (context.getType() !== 'http' || this.bindsItsOwn.of(context, this.bindsInterceptor)) return next.handle();
    return this.interceptor.intercept(context, next);
  }
}
