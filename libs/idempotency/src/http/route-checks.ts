/**
 * Startup checks of where `@Idempotent()` (or the global mode) meets a handler: what the
 * interceptor would not protect, bindings that would claim a key twice, and scopes that no
 * resolver can fill (docs/configuration.md, "Checked at startup"). Each throws an
 * `IdempotencyConfigurationError` that says how to fix it; the validator adds where.
 */
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants.js';
import { RequestMethod } from '@nestjs/common';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import type { ResolvedModuleSettings, ResolvedPolicy } from '../idempotency.options.js';

/** Nest's metadata key of `@MessagePattern()` / `@EventPattern()` (`@nestjs/microservices`, not imported here). */
const MESSAGE_PATTERN_METADATA = 'microservices:pattern';

/** What Nest declares of a handler: its HTTP route, if it has one. */
export interface HandlerRoute {
  /** `POST`, `PUT`... or `ALL`; undefined when the method is not an HTTP route. */
  method?: string;
  /** `POST /orders/:id`, for messages. */
  label?: string;
  /** A `@MessagePattern()` / `@EventPattern()` handler. */
  messageHandler: boolean;
}

export function handlerRouteOf(handler: object, controller: object): HandlerRoute {
  const messageHandler = Reflect.getMetadata(MESSAGE_PATTERN_METADATA, handler) !== undefined;
  const path: unknown = Reflect.getMetadata(PATH_METADATA, handler);
  if (path === undefined) return { messageHandler };
  const code = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod | undefined;
  const method = RequestMethod[code ?? RequestMethod.GET];
  const segments = [Reflect.getMetadata(PATH_METADATA, controller) as unknown, path].map(firstPath);
  const route = `/${segments.join('/')}`.replace(/\/{2,}/g, '/').replace(/(.)\/$/, '$1');
  return { method, label: `${method} ${route}`, messageHandler };
}

/** `@Idempotent()` where no HTTP request reaches it: a message handler, a gateway, a resolver. */
export function refuseNonHttpHandler(kind: 'message handler' | 'provider' | 'method'): never {
  const what = {
    'message handler': 'a message handler (@MessagePattern() / @EventPattern()), not an HTTP route',
    provider: 'not on a controller (a WebSocket gateway, a GraphQL resolver or another provider), so no HTTP route',
    method: 'not an HTTP route (no @Post(), @Patch()... on it)',
  }[kind];
  throw new IdempotencyConfigurationError(
    `@Idempotent() protects HTTP routes only, and this is ${what}: nothing would be protected. ` +
      'For messages use @IdempotentConsumer() from nestjs-idempotency/consumers; elsewhere call ' +
      'IdempotencyService.run() inside the handler; or remove @Idempotent().',
  );
}

/** `@Idempotent()` on the handler itself, whose HTTP method the policy does not protect. */
export function checkDecoratedMethod(route: HandlerRoute, policy: ResolvedPolicy): void {
  const method = route.method;
  if (method === undefined || method === 'ALL' || policy.methodSet.has(method)) return;
  throw new IdempotencyConfigurationError(
    `the route answers ${method}, which is not in methods (${policy.methods.join(', ')}), so @Idempotent() would ` +
      `protect nothing on it: add it, @Idempotent({ methods: ['${method}'] }) (or in IdempotencyModule's methods), ` +
      'or remove @Idempotent().',
  );
}

/** Two different idempotency interceptors on one route: each would claim the key, under different hooks. */
export function checkSingleBinding(bound: readonly string[]): void {
  const distinct = [...new Set(bound)];
  if (distinct.length < 2) return;
  throw new IdempotencyConfigurationError(
    `the route binds ${distinct.length} different idempotency interceptors (${distinct.join(', ')}): keep one ` +
      'decorator, @Idempotent() or the one createIdempotentDecorator() made for your subclass, not both.',
  );
}

/** A scope dimension that nothing can resolve: every request with a key would be a 500. */
export function checkScopeResolvable(
  policy: ResolvedPolicy,
  settings: Pick<ResolvedModuleSettings, 'tenant' | 'anonymousScope'>,
): void {
  if (!policy.scope.includes('tenant') || settings.tenant || settings.anonymousScope) return;
  const rest = policy.scope.filter((dimension) => dimension !== 'tenant');
  throw new IdempotencyConfigurationError(
    "the scope includes 'tenant', but IdempotencyModule has no `tenant` resolver and no `anonymousScope`, so " +
      'every request with a key would fail with 500 idempotency-scope-unresolved. Give the module a resolver ' +
      "(`tenant: fromHeader('x-tenant-id')`, `tenant: fromUser('tenantId')`), or `anonymousScope`, or leave " +
      `'tenant' out of the scope (\`scope: [${(rest.length > 0 ? rest : ['operation']).map((d) => `'${d}'`).join(', ')}]\`).`,
  );
}

function firstPath(path: unknown): string {
  const first: unknown = Array.isArray(path) ? path[0] : path;
  return typeof first === 'string' ? first.replace(/^\/+|\/+$/g, '') : '';
}
