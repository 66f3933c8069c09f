import { SkipIdempotencyRoute } from '../idempotency.metadata.js';

/**
 * Leaves a route (or every route of a controller) unprotected: in the global mode
 * (`protectAllRoutes: true`), and under a controller-wide `@Idempotent()`. A handler's own
 * `@Idempotent()` beats its controller's `@SkipIdempotency()`; both on one handler stop the
 * application at startup.
 *
 * @example
 * @Post('search')
 * @SkipIdempotency() // a query, not an operation: retries are harmless
 * search(@Body() query: SearchDto) {}
 * @publicApi
 */
export const SkipIdempotency = (): ClassDecorator & MethodDecorator => SkipIdempotencyRoute();
