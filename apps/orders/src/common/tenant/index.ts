export { SkipTenant } from './skip-tenant.decorator.js';
export { TenantId } from './tenant-id.decorator.js';
export { TenantGuard } from './tenant.guard.js';
export { isUuid, parseTenantId, TENANT_HEADER } from './tenant-id.js';
