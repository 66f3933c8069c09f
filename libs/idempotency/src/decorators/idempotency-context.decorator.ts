import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import { getIdempotencyContext } from '../context/idempotency-request-context.js';

export { getIdempotencyContext, IDEMPOTENCY_CONTEXT } from '../context/idempotency-request-context.js';

/**
 * Injects the `IdempotencyContextRef` of the current request (undefined without a key). Services
 * the handler calls reach the same context through `IdempotencyContextAccessor`.
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
