import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { TenantRequest } from './tenant.guard.js';

/**
 * The tenant of the request (a lower-case UUID), as checked by {@link TenantGuard}.
 *
 * @example
 * ```ts
 * @Get() list(@TenantId() tenantId: string) { ... }
 * ```
 */
export const TenantId = createParamDecorator((_data: unknown, context: ExecutionContext): string => {
  const tenantId = context.switchToHttp().getRequest<TenantRequest>().tenantId;
  if (tenantId === undefined) {
    // A route marked @SkipTenant() asked for the tenant: a programming error, not a client one.
    throw new Error('@TenantId() used on a route without a checked tenant: remove @SkipTenant() from it');
  }
  return tenantId;
});
