/**
 * Who an `Idempotency-Key` belongs to (docs/contract.md B.3): tenant, principal and operation
 * resolved into the scoped key, and the dimensions left out of it, compared through the
 * fingerprint instead.
 */
import type { ExecutionContext } from '@nestjs/common';
import { executionContextOf } from '../context/idempotency-request-context.js';
import { buildScopedKey, type ScopedKey } from '../engine/scoped-key.js';
import type { ResolvedModuleSettings, ResolvedPolicy } from '../idempotency.options.js';
import { routeTemplateOf, type HttpRequest } from './http-request.js';

/** Who the key belongs to, and what of the request goes into the fingerprint besides its content. */
export interface ResolvedScope {
  scoped: ScopedKey;
  operation: string;
  /** The resolved tenant, if any: for logs and spans. */
  tenant?: string;
  /** Dimensions left out of the identity, compared through the fingerprint (docs/contract.md B.3 rule 12). */
  fingerprintExtras: Record<string, string>;
}

/**
 * Resolves tenant, principal and operation into the scoped key. A dimension in the scope that
 * resolves to nothing falls back to `anonymousScope`; failing that, the error `unresolved`
 * returns is thrown: never a silent global namespace (rule 13).
 */
export async function resolveScope(
  request: HttpRequest,
  policy: ResolvedPolicy,
  key: string,
  settings: Pick<ResolvedModuleSettings, 'tenant' | 'principal' | 'anonymousScope'>,
  unresolved: (dimension: 'tenant' | 'principal', operation: string) => Error,
): Promise<ResolvedScope> {
  const operation = policy.operation ?? `${request.method.toUpperCase()} ${routeTemplateOf(request)}`;
  const inScope = policy.scope;
  const anonymous: ('tenant' | 'principal')[] = [];
  // Resolvers get the route's ExecutionContext too; the interceptor remembered it on the request.
  const context = executionContextOf(request) as ExecutionContext;
  const fallBack = async (dimension: 'tenant' | 'principal'): Promise<string | undefined> => {
    if (!inScope.includes(dimension)) return undefined;
    const bucket = settings.anonymousScope ? await settings.anonymousScope(request, context) : undefined;
    if (bucket !== undefined && bucket !== '') {
      anonymous.push(dimension);
      return bucket;
    }
    throw unresolved(dimension, operation);
  };
  // Resolvers are usually synchronous (a header, `request.user`): no promise is made for them.
  const resolve = (dimension: 'tenant' | 'principal'): string | undefined | Promise<string | undefined> => {
    const resolver = settings[dimension];
    const value = resolver ? resolver(request, context) : undefined;
    if (isPromiseLike(value))
      return Promise.resolve(value).then((v) => (v !== undefined && v !== '' ? v : fallBack(dimension)));
    return value !== undefined && value !== '' ? value : fallBack(dimension);
  };
  const resolvedTenant = resolve('tenant');
  const tenant = isPromiseLike(resolvedTenant) ? await resolvedTenant : resolvedTenant;
  const resolvedPrincipal = resolve('principal');
  const principal = isPromiseLike(resolvedPrincipal) ? await resolvedPrincipal : resolvedPrincipal;
  const fingerprintExtras: Record<string, string> = {};
  // Every dimension resolved but left out of the identity is compared like the payload (rule 12a).
  if (!inScope.includes('tenant') && tenant !== undefined) fingerprintExtras.tenant = tenant;
  if (!inScope.includes('principal')) fingerprintExtras.principal = principal ?? '';
  if (!inScope.includes('operation')) fingerprintExtras.operation = operation;
  return {
    scoped: buildScopedKey({ operation, tenant, principal, key, anonymous }, policy.scope),
    operation,
    tenant,
    fingerprintExtras,
  };
}

function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === 'function';
}
