import { Reflector } from '@nestjs/core';
import {
  IDEMPOTENCY_OUTCOME_METADATA,
  IDEMPOTENT_ROUTE_METADATA,
  SKIP_IDEMPOTENCY_METADATA,
} from './idempotency.constants.js';
import type { IdempotentOptions } from './interfaces/idempotency-module-options.interface.js';
import type { OutcomeOverride } from './engine/outcome-policy.js';

/**
 * Route metadata of `@Idempotent()`. A leaf file, so the decorator and the interceptor do not
 * import each other. Read with `reflector.getAllAndOverride(IdempotentRoute, [handler, class])`.
 */
export const IdempotentRoute = Reflector.createDecorator<IdempotentOptions | undefined, IdempotentOptions>({
  key: IDEMPOTENT_ROUTE_METADATA,
  transform: (options) => ({ ...options }),
});

/** Route metadata of `@IdempotencyOutcome()`. */
export const IdempotencyOutcomeRoute = Reflector.createDecorator<OutcomeOverride>({
  key: IDEMPOTENCY_OUTCOME_METADATA,
});

/** Route metadata of `@SkipIdempotency()`: the route is not protected, in global mode or under a class-level `@Idempotent()`. */
export const SkipIdempotencyRoute = Reflector.createDecorator<void, true>({
  key: SKIP_IDEMPOTENCY_METADATA,
  transform: () => true,
});
