import { type CanActivate, type ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { ProblemException } from '../problem-details/problem-details.js';
import { SkipTenant } from './skip-tenant.decorator.js';
import { parseTenantId, TENANT_HEADER } from './tenant-id.js';

/** The request, as the guard leaves it for `@TenantId()`. */
export interface TenantRequest {
  headers: Record<string, string | string[] | undefined>;
  tenantId?: string;
}

/**
 * Global guard: every route needs `X-Tenant-ID: <uuid>` unless it is marked `@SkipTenant()`.
 * Runs after routing, so an unknown route is a 404 whatever its headers, and before pipes, so
 * a request without a tenant is refused before its body is validated.
 */
@Injectable()
export class TenantGuard implements CanActivate {
  constructor(private readonly reflector: Reflector) {}

  canActivate(context: ExecutionContext): boolean {
    if (context.getType() !== 'http') {
      return true;
    }
    const skip = this.reflector.getAllAndOverride(SkipTenant, [context.getHandler(), context.getClass()]);
    if (skip === true) {
      return true;
    }
    const request = context.switchToHttp().getRequest<TenantRequest>();
    const parsed = parseTenantId(request.headers[TENANT_HEADER]);
    switch (parsed.kind) {
      case 'missing':
        throw new ProblemException('tenantRequired', 'Send the tenant as an X-Tenant-ID header holding a UUID.');
      case 'invalid':
        throw new ProblemException('tenantInvalid', 'The X-Tenant-ID header must hold exactly one UUID.');
      case 'ok':
        request.tenantId = parsed.tenantId;
        return true;
    }
  }
}
