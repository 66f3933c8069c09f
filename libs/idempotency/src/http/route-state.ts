/**
 * What every request of one `@Idempotent()` route shares (its resolved policy, its outcome
 * override, whether its handler writes the response itself), resolved on its first request.
 */
import { REDIRECT_METADATA, RESPONSE_PASSTHROUGH_METADATA, ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import type { ExecutionContext } from '@nestjs/common';
import type { Reflector } from '@nestjs/core';
import type { OutcomeOverride } from '../engine/outcome-policy.js';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency.constants.js';
import { IdempotencyOutcomeRoute } from '../idempotency.metadata.js';
import { resolvePolicy, type ResolvedModuleSettings, type ResolvedPolicy } from '../idempotency.options.js';
import { RouteMemo } from './route-memo.js';
import { protectedRouteOptions } from './route-protection.js';

/** What every request of one route shares, resolved on its first request. */
export interface RouteState {
  policy: ResolvedPolicy;
  /** `@IdempotencyOutcome()` on the route or its controller. */
  outcome: OutcomeOverride | undefined;
  /** Headers the interceptor sets itself: never stored (the key echo, the replay marker). */
  ownHeaders: ReadonlySet<string>;
  /** The handler takes the response (`@Res()`, passthrough or not, `@Next()`) and may write it itself. */
  handlerWrites: boolean;
  /** `@Res({ passthrough: true })`: the handler returns its result for Nest to write. */
  passthrough: boolean;
  /** `@Redirect()`: Nest answers a 3xx after the handler, over the route's 201 or 200. */
  redirects: boolean;
}

/** The state of each route, by controller and handler; `null` for a route the layer does not protect. */
export class RouteStates {
  private readonly routes = new RouteMemo<RouteState | null>();

  constructor(
    private readonly reflector: Reflector,
    private readonly settings: ResolvedModuleSettings,
  ) {}

  of(context: ExecutionContext): RouteState | null {
    return this.routes.of(context, this.resolve);
  }

  private readonly resolve = (context: ExecutionContext): RouteState | null => {
    const handler = context.getHandler();
    const controller = context.getClass();
    const options = protectedRouteOptions(this.reflector, handler, controller, this.settings.protectAllRoutes);
    return options ? this.routeStateOf(context, resolvePolicy(this.settings.policyOptions, options)) : null;
  };

  private routeStateOf(context: ExecutionContext, policy: ResolvedPolicy): RouteState {
    return {
      policy,
      outcome: this.reflector.getAllAndOverride(IdempotencyOutcomeRoute, [context.getHandler(), context.getClass()]),
      ownHeaders: new Set([IDEMPOTENCY_KEY_HEADER.toLowerCase(), policy.replayHeader.name.toLowerCase()]),
      handlerWrites: takesResponse(context),
      passthrough:
        Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, context.getClass(), context.getHandler().name) === true,
      redirects: Reflect.getMetadata(REDIRECT_METADATA, context.getHandler()) !== undefined,
    };
  }
}

/**
 * True when the handler is handed the response (`@Res()`, with passthrough or not, or `@Next()`):
 * it may write the answer itself, and its writes are told from outer layers' by their flow.
 */
function takesResponse(context: ExecutionContext): boolean {
  const args: Record<string, unknown> | undefined = Reflect.getMetadata(
    ROUTE_ARGS_METADATA,
    context.getClass(),
    context.getHandler().name,
  );
  return Object.keys(args ?? {}).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === RouteParamtypes.NEXT || type === RouteParamtypes.RESPONSE;
  });
}
