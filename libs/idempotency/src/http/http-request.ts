/**
 * The request and the response as Express and Fastify hand them to the interceptor, and the
 * small readers and writers it applies to both.
 */
import type { ServerResponse } from 'node:http';
import type { IdempotencyHttpRequest } from '../interfaces/idempotency-module-options.interface.js';

/** The request as Express and Fastify hand it over; only what the adapter reads. */
export type HttpRequest = IdempotencyHttpRequest & {
  url?: string;
  originalUrl?: string;
  params?: Record<string, string>;
  body?: unknown;
  rawBody?: Buffer;
  route?: { path?: unknown };
  baseUrl?: string;
  routeOptions?: { url?: string };
  raw?: { url?: string };
};

/** The response as Express (a `ServerResponse`) or Fastify (a reply around one) hands it over. */
export type HttpResponse = { raw?: ServerResponse } & Partial<ServerResponse>;

/** The received field value, verbatim, for the echo (docs/contract.md B.6). */
export function receivedKey(request: HttpRequest): string {
  const value = request.headers['idempotency-key'];
  return Array.isArray(value) ? value.join(', ') : (value ?? '');
}

/** `POST /orders/:id`-style template: Express keeps it on `req.route`, Fastify on `routeOptions`. */
export function routeTemplateOf(request: HttpRequest): string {
  if (request.routeOptions?.url) return request.routeOptions.url;
  const path = request.route?.path;
  if (typeof path === 'string') return `${request.baseUrl ?? ''}${path}`;
  const url = request.originalUrl ?? request.url ?? '';
  const queryAt = url.indexOf('?');
  return queryAt < 0 ? url : url.slice(0, queryAt);
}

/** Size of the body to fingerprint: the raw bytes when kept, else what `Content-Length` announced. */
export function bodyBytesOf(request: HttpRequest): number {
  if (Buffer.isBuffer(request.rawBody)) return request.rawBody.length;
  const declared = Number(firstHeader(request.headers['content-length']));
  return Number.isFinite(declared) ? declared : 0;
}

export function firstHeader(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}

export function setHeader(response: HttpResponse, name: string, value: string): void {
  const reply = response as { header?: (n: string, v: string) => unknown };
  if (typeof reply.header === 'function' && response.raw) reply.header(name, value);
  else (response as ServerResponse).setHeader(name, value);
}
