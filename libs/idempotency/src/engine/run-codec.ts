import { HttpException } from '@nestjs/common';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';

const JSON_HEADERS = { 'content-type': 'application/json' };

/** A `run()` result as a stored response: 200 and its JSON (undefined becomes an empty body). */
export function encodeRunValue(value: unknown): StoredResponse {
  return {
    statusCode: 200,
    headers: JSON_HEADERS,
    body: value === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(value)),
  };
}

/**
 * A `run()` failure as a stored response. An `HttpException` keeps its status and body, so the
 * outcome policy can store a definitive 4xx; anything else is a 500 (released by default), and
 * its message is never stored: it may hold internals.
 */
export function encodeRunFailure(error: unknown): StoredResponse {
  if (error instanceof HttpException) {
    const statusCode = error.getStatus();
    let body: string;
    try {
      body = JSON.stringify(error.getResponse());
    } catch {
      body = JSON.stringify({ statusCode, message: error.message }); // a body with a cycle or a BigInt
    }
    return { statusCode, headers: JSON_HEADERS, body: Buffer.from(body) };
  }
  return { statusCode: 500, headers: JSON_HEADERS, body: Buffer.from('{"message":"Internal error"}') };
}

/** A successful run whose value JSON cannot hold (a `BigInt`, a cycle): completed without a body. */
export function unencodableRunValue(): StoredResponse {
  return { statusCode: 200, headers: JSON_HEADERS, bodyOmitted: true };
}

/** The JSON of a stored body, or undefined for an empty one. */
export function decodeRunBody(response: StoredResponse): unknown {
  const body = response.body;
  return body && body.length > 0 ? JSON.parse(body.toString('utf8')) : undefined;
}
