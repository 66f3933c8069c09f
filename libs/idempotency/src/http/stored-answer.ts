/**
 * Sending a stored answer again (docs/contract.md B.6, B.8): its headers with the key echo and
 * the replay marker, written straight to the Express or Fastify response.
 */
import type { ServerResponse } from 'node:http';
import { IDEMPOTENCY_KEY_HEADER } from '../idempotency.constants.js';
import type { ResolvedPolicy } from '../idempotency.options.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { setHeader, type HttpResponse } from './http-request.js';

/** Statuses whose response has no body (RFC 9110 §6.4.1). */
export function hasNullBody(status: number): boolean {
  return status === 204 || status === 205 || status === 304;
}

/**
 * The headers of a replay (docs/contract.md B.6, B.8), names lower-cased and repeated values joined as a
 * Web `Headers` joins them: the stored ones, a fresh `Content-Length`, the key echo and the
 * replay marker.
 */
export function replayedHeaders(
  stored: StoredResponse,
  policy: ResolvedPolicy,
  echo: string | undefined,
  replayed: boolean,
): Map<string, string> {
  const headers = new Map<string, string>();
  for (const [name, value] of Object.entries(stored.headers)) {
    const values = Array.isArray(value) ? value : [value];
    if (values.length > 0) headers.set(name.toLowerCase(), values.join(', '));
  }
  if (!hasNullBody(stored.statusCode)) headers.set('content-length', String(stored.body?.length ?? 0));
  if (echo !== undefined) headers.set(IDEMPOTENCY_KEY_HEADER.toLowerCase(), echo);
  if (replayed || policy.replayHeader.onFresh)
    headers.set(policy.replayHeader.name.toLowerCase(), replayMarker(policy, replayed));
  return headers;
}

/** The value of the replay marker header: `?1`/`?0` as a structured boolean, else `true`/`false`. */
export function replayMarker(policy: ResolvedPolicy, replayed: boolean): string {
  if (policy.replayHeader.format === 'sf-boolean') return replayed ? '?1' : '?0';
  return replayed ? 'true' : 'false';
}

/**
 * Writes an answer to the response directly (Fastify's reply or Express's `ServerResponse`).
 * Nest then finds the response sent and adds nothing to it.
 */
export function writeAnswer(
  response: HttpResponse,
  status: number,
  headers: Iterable<[string, string]>,
  body: Buffer,
): void {
  const reply = response as HttpResponse & { code?: (s: number) => unknown; send?: (b: unknown) => unknown };
  if (reply.raw && reply.code && reply.send) {
    reply.code(status);
    for (const [name, value] of headers) setHeader(reply, name, value);
    reply.send(body);
  } else {
    const raw = response as ServerResponse;
    raw.statusCode = status;
    for (const [name, value] of headers) raw.setHeader(name, value);
    raw.end(body);
  }
}

/** The named stored headers, repeated values joined (the `Location` of an answer that cannot be replayed). */
export function pickHeaders(headers: Record<string, string | string[]>, names: string[]): Record<string, string> {
  const picked: Record<string, string> = {};
  for (const name of names) {
    const value = headers[name];
    if (value !== undefined) picked[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return picked;
}
