import autocannon, { type AutocannonRequest } from 'autocannon';
import { randomUUID } from 'node:crypto';
import type { Scenario } from './scenarios.js';

/** The tenant of every request (keys are scoped per tenant and operation). */
const TENANT_ID = '6f1c1f3e-8a55-4b8e-9a57-3f7f1b0a2c10';

/** The order every request posts: a customer, a currency and two lines. */
const ORDER_BODY = JSON.stringify({
  customerId: '0b6b9c0e-2f4d-4d7a-9a77-5d1c7f3b8e21',
  currency: 'EUR',
  items: [
    { sku: 'SKU-1001', quantity: 2, unitPriceCents: 1999 },
    { sku: 'SKU-2002', quantity: 1, unitPriceCents: 4500 },
  ],
});

const BASE_HEADERS = { 'content-type': 'application/json', 'x-tenant-id': TENANT_ID };

/** One measured (or warm-up) run of a scenario. */
export interface LoadResult {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Requests sent, including those cut off when the run stopped (their server work still happens). */
  sent: number;
  /** Responses that were not 2xx, plus connection errors and timeouts. */
  failures: number;
}

export interface LoadOptions {
  connections: number;
  durationSeconds: number;
}

/**
 * Fresh scenarios send a new `Idempotency-Key` with every request (`plain` too, where it is
 * ignored, so every scenario sends the same bytes); replay scenarios send `replayKey` every time.
 */
function requestOf(scenario: Scenario, replayKey: string): AutocannonRequest {
  const request: AutocannonRequest = {
    method: 'POST',
    path: '/orders',
    headers: { ...BASE_HEADERS, 'idempotency-key': replayKey },
    body: ORDER_BODY,
  };
  if (scenario.keys === 'fresh') {
    request.setupRequest = (req) => ({ ...req, headers: { ...req.headers, 'idempotency-key': randomUUID() } });
  }
  return request;
}

/** Runs autocannon against `url` for the scenario. */
export async function runLoad(
  url: string,
  scenario: Scenario,
  replayKey: string,
  options: LoadOptions,
): Promise<LoadResult> {
  const result = await autocannon({
    url,
    connections: options.connections,
    pipelining: 1,
    duration: options.durationSeconds,
    timeout: 10,
    requests: [requestOf(scenario, replayKey)],
  });
  return {
    rps: result['2xx'] / result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    sent: result.requests.sent,
    failures: result.non2xx + result.errors + result.timeouts,
  };
}

/**
 * Sends one request with `key` (a replay scenario's first, which stores the record, so the
 * measurement only sees replays) and returns the response body's size in bytes.
 */
export async function sendOnce(url: string, key: string): Promise<{ status: number; bodyBytes: number }> {
  const response = await fetch(`${url}/orders`, {
    method: 'POST',
    headers: { ...BASE_HEADERS, 'idempotency-key': key },
    body: ORDER_BODY,
  });
  const body = Buffer.from(await response.arrayBuffer());
  return { status: response.status, bodyBytes: body.length };
}
