/**
 * The idempotency interceptors a route binds itself (`@Idempotent()`, a decorator made by
 * `createIdempotentDecorator()`, or `@UseInterceptors(IdempotencyInterceptor)`), on the handler
 * and on its controller: the global mode leaves such a route to them, and more than one is
 * refused at startup.
 */
import { INTERCEPTORS_METADATA } from '@nestjs/common/constants.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';

/** Each binding's name, handler bindings after the controller's (the order Nest runs them in). */
export function boundIdempotencyInterceptors(handler: object, controller: object): string[] {
  const bound: unknown[] = [
    ...((Reflect.getMetadata(INTERCEPTORS_METADATA, controller) as unknown[] | undefined) ?? []),
    ...((Reflect.getMetadata(INTERCEPTORS_METADATA, handler) as unknown[] | undefined) ?? []),
  ];
  return bound.flatMap((interceptor) => {
    if (interceptor === IdempotencyInterceptor) return [IdempotencyInterceptor.name];
    if (typeof interceptor === 'function' && interceptor.prototype instanceof IdempotencyInterceptor)
      return [(interceptor as { name: string }).name];
    if (interceptor instanceof IdempotencyInterceptor) return [`an instance of ${interceptor.constructor.name}`];
    return [];
  });
}
