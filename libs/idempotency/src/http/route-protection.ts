/**
 * Which routes the idempotency layer protects, and with which options: `@Idempotent()` on the
 * handler, else nothing under `@SkipIdempotency()`, else `@Idempotent()` on the controller, else,
 * in global mode, the module's options.
 */
import type { Reflector } from '@nestjs/core';
import { IdempotentRoute, SkipIdempotencyRoute } from '../idempotency.metadata.js';
import type { IdempotentOptions } from '../interfaces/idempotency-module-options.interface.js';

/** The route options a handler is protected with, or undefined when it is not protected. */
export function protectedRouteOptions(
  reflector: Reflector,
  handler: object,
  controller: object,
  protectAllRoutes: boolean,
): IdempotentOptions | undefined {
  const onHandler: IdempotentOptions | undefined = reflector.get(IdempotentRoute, handler as () => unknown);
  if (onHandler) return onHandler;
  if (reflector.getAllAndOverride(SkipIdempotencyRoute, [handler as () => unknown, controller as () => unknown])) {
    return undefined;
  }
  const onController: IdempotentOptions | undefined = reflector.get(IdempotentRoute, controller as () => unknown);
  return onController ?? (protectAllRoutes ? {} : undefined);
}
