import { HttpException, StreamableFile } from '@nestjs/common';
import type { OutgoingHttpHeaders } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { HandlerOutcome } from '../engine/idempotency-engine.types.js';
import { decideOutcome, type OutcomePolicy } from '../engine/outcome-policy.js';
import type { CapturedResponse } from './response-capture.js';

/** The route's status and headers as they stood when the handler settled. */
export interface RouteResponseState {
  statusCode: number;
  headers: OutgoingHttpHeaders;
  /** Fastify serialises a string as `text/plain`, Express as `text/html`. */
  platform: 'express' | 'fastify';
}

/**
 * The handler's own result as the route would have sent it when no response written after the
 * handler can be trusted to be its own (docs/contract.md B.7 rule 17a): an outer layer answered first,
 * the client went away, or an outer layer turned the result into something else.
 *
 * - a value: the route's status and headers, the body serialised as Nest's platform adapters do
 *   (objects as JSON, strings as text, buffers as bytes); a stream, or a value that cannot be
 *   serialised (a `BigInt`, a cycle), completes without a body (`idempotency-replay-unavailable`);
 * - an error: an `HttpException` with its status and body, as Nest's base exception filter writes
 *   it; anything else is a 500 (released by the default policy).
 */
export function renderHandlerOutcome(outcome: HandlerOutcome, route: RouteResponseState): CapturedResponse {
  return outcome.ok ? renderValue(outcome.value, route) : renderError(outcome.error);
}

function renderValue(value: unknown, route: RouteResponseState): CapturedResponse {
  const { statusCode } = route;
  const headers: OutgoingHttpHeaders = { ...route.headers };
  if (value === undefined || value === null) return { statusCode, headers, body: Buffer.alloc(0), bodyOmitted: false };
  if (value instanceof StreamableFile || isStream(value)) return { statusCode, headers, bodyOmitted: true };
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) {
    headers['content-type'] ??= 'application/octet-stream';
    return { statusCode, headers, body: Buffer.from(value), bodyOmitted: false };
  }
  if (typeof value === 'object' || (route.platform === 'fastify' && typeof value !== 'string')) {
    let json: string | undefined;
    try {
      json = JSON.stringify(value);
    } catch {
      return { statusCode, headers, bodyOmitted: true };
    }
    headers['content-type'] ??= 'application/json; charset=utf-8';
    return { statusCode, headers, body: Buffer.from(json ?? ''), bodyOmitted: false };
  }
  headers['content-type'] ??= route.platform === 'fastify' ? 'text/plain; charset=utf-8' : 'text/html; charset=utf-8';
  return { statusCode, headers, body: Buffer.from(String(value)), bodyOmitted: false };
}

function renderError(error: unknown): CapturedResponse {
  const headers: OutgoingHttpHeaders = { 'content-type': 'application/json; charset=utf-8' };
  if (error instanceof HttpException) {
    const statusCode = error.getStatus();
    const response = error.getResponse();
    const body = typeof response === 'object' && response !== null ? response : { statusCode, message: response };
    return { statusCode, headers, body: Buffer.from(safeJson(body, statusCode)), bodyOmitted: false };
  }
  return {
    statusCode: 500,
    headers,
    body: Buffer.from(safeJson({ statusCode: 500, message: 'Internal server error' }, 500)),
    bodyOmitted: false,
  };
}

function safeJson(body: unknown, statusCode: number): string {
  try {
    return JSON.stringify(body);
  } catch {
    return JSON.stringify({ statusCode, message: STATUS_CODES[statusCode] ?? 'Error' });
  }
}

/**
 * Whether a response written after the handler settled is the route's rendering of the handler's
 * own outcome, and not an outer layer's change of it (docs/contract.md B.7 rule 17a):
 * - a value: written with the route's status (or, under `@Redirect()`, a redirect);
 * - an `HttpException`: an error status the outcome policy treats as the exception's own (an
 *   exception filter may restyle a 400 as a 422 problem; it may not turn a 402 into a 502);
 * - another error: an error status (only the route's filters know which); never a success.
 */
export function isRenderingOf(
  written: CapturedResponse,
  outcome: HandlerOutcome,
  route: RouteResponseState & { redirects: boolean },
  policy: OutcomePolicy,
): boolean {
  const status = written.statusCode;
  if (outcome.ok) return status === route.statusCode || (route.redirects && status >= 300 && status < 400);
  if (status < 400) return false;
  if (!(outcome.error instanceof HttpException)) return true;
  return decideOutcome(status, policy) === decideOutcome(outcome.error.getStatus(), policy);
}

/** The error a handler throws when it writes to a response an outer layer has already sent. */
export function isHeadersSentError(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'ERR_HTTP_HEADERS_SENT';
}

function isStream(value: unknown): boolean {
  return typeof (value as { pipe?: unknown }).pipe === 'function';
}
