/**
 * Typed builders of the usual scope resolvers (docs/configuration.md, "Who owns a key"): the
 * obvious `(req) => req.headers['x-tenant-id']` does not type-check (a header may repeat), and
 * each of these says what it does with a repeated, empty or missing value.
 */
import type { IdempotencyHttpRequest, ScopeResolver } from '../interfaces/idempotency-module-options.interface.js';

/**
 * The value of a request header, trimmed: `fromHeader('x-tenant-id')`. A missing or empty header,
 * or one sent several times (or as a comma-separated list) with different values, resolves to nothing (the request is then
 * refused, or goes to `anonymousScope`): a key never belongs to an ambiguous owner. Check that
 * the caller may act for the tenant it names (a guard) before the idempotency layer runs.
 *
 * @example
 * IdempotencyModule.forRoot({ tenant: fromHeader('x-tenant-id') })
 * @publicApi
 */
export function fromHeader(name: string): ScopeResolver {
  if (typeof name !== 'string' || !/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) {
    throw new TypeError(`fromHeader() needs a header name, got ${JSON.stringify(name)}`);
  }
  const header = name.toLowerCase();
  return (request) => singleValue(request.headers[header]);
}

/**
 * A field of the authenticated user (`request.user`, as Passport sets it), as a string:
 * `fromUser('tenantId')`, or a dotted path `fromUser('org.id')`. Numbers are turned into strings;
 * anything else (missing, an object, an empty string) resolves to nothing.
 *
 * @example
 * IdempotencyModule.forRoot({ tenant: fromUser('tenantId'), principal: fromUser('sub') })
 * @publicApi
 */
export function fromUser(path: string): ScopeResolver {
  if (typeof path !== 'string' || path.length === 0) {
    throw new TypeError(`fromUser() needs a field name or dotted path, got ${JSON.stringify(path)}`);
  }
  const fields = path.split('.');
  return (request) => {
    let value: unknown = request.user;
    for (const field of fields) value = (value as Record<string, unknown> | null | undefined)?.[field];
    if (typeof value === 'number' && Number.isFinite(value)) return String(value);
    return typeof value === 'string' && value.length > 0 ? value : undefined;
  };
}

/**
 * The client's IP address as the platform reports it (`request.ip`: Express and Fastify honour
 * their `trust proxy` settings). Meant for `anonymousScope`: callers behind one NAT share a bucket.
 *
 * @example
 * IdempotencyModule.forRoot({ tenant: fromHeader('x-tenant-id'), anonymousScope: fromClientIp() })
 * @publicApi
 */
export function fromClientIp(): ScopeResolver {
  return (request: IdempotencyHttpRequest) => {
    const ip = request.ip;
    return typeof ip === 'string' && ip.length > 0 ? `ip:${ip}` : undefined;
  };
}

/** Node joins a repeated header with commas; an array comes from other platforms. */
function singleValue(value: string | string[] | undefined): string | undefined {
  const values = (Array.isArray(value) ? value : [value ?? ''])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
  return values.length > 0 && values.every((v) => v === values[0]) ? values[0] : undefined;
}
