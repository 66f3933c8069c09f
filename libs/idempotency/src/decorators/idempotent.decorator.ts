import { applyDecorators, UseFilters, UseInterceptors, type Type } from '@nestjs/common';
import { IdempotencyProblemFilter } from '../http/problem-details.filter.js';
import { IdempotentRoute } from '../idempotency.metadata.js';
import { idempotencyApiDocs } from './idempotency-api-docs.js';
import { IdempotencyInterceptor } from '../http/idempotency.interceptor.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';

/**
 * Builds an `@Idempotent()`-style decorator that binds your own subclass of
 * `IdempotencyInterceptor`, so its `protected` hooks (`getKey`, `getScope`, `getFingerprint`,
 * `replay`, `createProblem`) take effect. Nest instantiates an interceptor class in the module
 * of each controller that uses it; binding the subclass here is what replaces the default.
 *
 * @example
 * @Injectable()
 * class TenantProblemsInterceptor extends IdempotencyInterceptor {
 *   protected override createProblem(kind: IdempotencyProblemKind, options?: IdempotencyProblemOptions) {
 *     const problem = super.createProblem(kind, options);
 *     problem.problem.docs = 'https://api.example.com/docs/idempotency';
 *     return problem;
 *   }
 * }
 * export const TenantIdempotent = createIdempotentDecorator(TenantProblemsInterceptor);
 * // @Post() @TenantIdempotent({ required: true }) create() {}
 * @publicApi
 */
export function createIdempotentDecorator(interceptor: Type<IdempotencyInterceptor>) {
  return (options: IdempotentOptions = {}) =>
    applyDecorators(
      IdempotentRoute(options),
      UseInterceptors(interceptor),
      UseFilters(IdempotencyProblemFilter),
      idempotencyApiDocs(options),
    );
}

/**
 * Makes a route (or every route of a controller) safe to retry with an `Idempotency-Key`
 * (docs/contract.md B.1). Options override the module's, field by field. With `@nestjs/swagger`
 * installed, it also documents the `Idempotency-Key` header and the problem responses.
 *
 * @example
 * @Post()
 * @Idempotent({ required: true, operation: 'orders.create' })
 * create(@Body() dto: CreateOrderDto, @IdempotencyContext() idem: IdempotencyContextRef) {}
 * @publicApi
 */
export const Idempotent = createIdempotentDecorator(IdempotencyInterceptor);
