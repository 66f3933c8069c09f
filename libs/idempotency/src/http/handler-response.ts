import { HttpException, StreamableFile } from '@nestjs/common';
import type { OutgoingHttpHeaders } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { HandlerOutcome } from '../engine/idempotency-engine.types.js';
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

/** Whether the status a response was written with is that of the handler's own outcome. */
export function statusOfOutcome(outcome: HandlerOutcome, route: RouteResponseState): number | undefined {
  if (outcome.ok) return route.statusCode;
  // An error of another kind: the route's exception filters decide its status, and the written
  // response is their rendering.
  return outcome.error instanceof HttpException ? outcome.error.getStatus() : undefined;
}

/** The error a handler throws when it writes to a response an outer layer has already sent. */
export function isHeadersSentError(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'ERR_HTTP_HEADERS_SENT';
}

function isStream(value: unknown): boolean {
  return typeof (value as { pipe?: unknown }).pipe === 'function';
}
