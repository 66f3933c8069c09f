import type { ExecutionContext } from '@nestjs/common';

/**
 * A value worked out once per route (its controller class and handler) on the route's first
 * request, then read from here on every request; held only as long as the route's classes live.
 */
export class RouteMemo<T> {
  private readonly byController = new WeakMap<object, WeakMap<object, T>>();

  /**
   * The route's value, from `compute` the first time (it must not return `undefined`). Pass a
   * function made once, not one per request: this runs on every request.
   */
  of(context: ExecutionContext, compute: (context: ExecutionContext) => T): T {
    const handler = context.getHandler();
    const controller = context.getClass();
    let byHandler = this.byController.get(controller);
    if (!byHandler) this.byController.set(controller, (byHandler = new WeakMap()));
    let value = byHandler.get(handler);
    if (value === undefined) {
      value = compute(context);
      byHandler.set(handler, value);
    }
    return value;
  }
}
