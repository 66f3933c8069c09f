import { applyDecorators, UseFilters, UseInterceptors } from '@nestjs/common';
import { IdempotencyProblemFilter } from '../errors/problem-details.filter.js';
import { IdempotentRoute } from '../idempotency.metadata.js';
import { idempotencyApiDocs } from './idempotency-api-docs.js';
import { IdempotencyInterceptor } from '../interceptors/idempotency.interceptor.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';

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
export const Idempotent = (options: IdempotentOptions = {}) =>
  applyDecorators(
    IdempotentRoute(options),
    UseInterceptors(IdempotencyInterceptor),
    UseFilters(IdempotencyProblemFilter),
    idempotencyApiDocs(options),
  );
