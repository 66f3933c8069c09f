import { isUUID } from 'class-validator';

/** The request header that names the tenant. */
export const TENANT_HEADER = 'x-tenant-id';

/** Result of reading the tenant header: a discriminated union, never a thrown error. */
export type TenantIdParse = { kind: 'ok'; tenantId: string } | { kind: 'missing' } | { kind: 'invalid' };

/**
 * Any RFC 9562 UUID (versions 1 to 8, nil, max), in either case. Ids are compared and stored
 * in lower case, as RFC 9562 asks for output.
 */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && isUUID(value, 'all');
}

/**
 * Reads a tenant id from the raw header value (Node joins repeated headers with ", ", which
 * makes them invalid). Pure, for the guard and its unit tests.
 */
export function parseTenantId(header: string | string[] | undefined): TenantIdParse {
  if (header === undefined || (typeof header === 'string' && header.trim() === '')) {
    return { kind: 'missing' };
  }
  const value = Array.isArray(header) ? header.join(', ') : header.trim();
  return isUuid(value) ? { kind: 'ok', tenantId: value.toLowerCase() } : { kind: 'invalid' };
}
