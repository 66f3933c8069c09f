import { Reflector } from '@nestjs/core';

/**
 * Marks a controller or route as tenant-free (`/health`, and later `/metrics`, `/docs` and the
 * payment provider's webhooks, whose tenant comes from the payment they name).
 */
export const SkipTenant = Reflector.createDecorator<boolean | undefined, boolean>({
  key: 'orders:skip-tenant',
  transform: (skip) => skip ?? true,
});
