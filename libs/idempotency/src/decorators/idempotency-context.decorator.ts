import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { IdempotencyContextRef } from '../engine/idempotency-context.js';

/** Where the interceptor leaves the context on the request object. */
export const IDEMPOTENCY_CONTEXT = Symbol.for('idempotency.context');

/** The context of the request, or undefined when it runs without a key. */
export function getIdempotencyContext(request: object): IdempotencyContextRef | undefined {
  return (request as Record<symbol, IdempotencyContextRef | undefined>)[IDEMPOTENCY_CONTEXT];
}

/**
 * Injects the `IdempotencyContextRef` of the current request (undefined without a key).
 *
 * @example
 * create(@Body() dto: CreateOrderDto, @IdempotencyContext() idem?: IdempotencyContextRef) {
 *   return this.payments.charge(dto, { providerKey: idem?.derivedKey('payment') });
 * }
 * @publicApi
 */
export const IdempotencyContext = createParamDecorator((_data: unknown, ctx: ExecutionContext) =>
  getIdempotencyContext(ctx.switchToHttp().getRequest()),
);
