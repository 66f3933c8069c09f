import { send, type HttpResult } from '../support/http/send.js';
import { backends } from '../support/orders/backends.js';
import { useOrdersApp } from '../support/orders/orders-app.js';

const TOKEN = 'adm_health_0123456789abcdef0123456789abcdef';
const [serversName, serversBackend] = backends[0];
const [, embeddedBackend] = backends[1];

const health = (url: string, authorization?: string): Promise<HttpResult> =>
  send(url, '/health', { method: 'GET', headers: authorization === undefined ? {} : { Authorization: authorization } });

/** What anyone may see: each backend's status and each idempotency tier's, nothing else. */
const STATUSES_ONLY = {
  database: { status: 'up' },
  idempotency: { status: 'up', fast: { status: 'up' }, durable: { status: 'up' } },
  redis: { status: 'up' },
};

/**
 * `GET /health` of the sample service on a real socket (issue 18 item 8): anonymous callers get
 * statuses only, so no store error (host names, driver messages) leaks; the admin token adds the
 * details. When a backend is down, the same split holds (see processes.e2e-spec.ts, Redis killed).
 */
describe(`GET /health on ${serversName} with ADMIN_TOKEN set`, () => {
  const served = useOrdersApp(serversBackend, { ADMIN_TOKEN: TOKEN });

  it('shows statuses only to a caller without a token, and to one with a wrong token or scheme (no 401: probes send none)', async () => {
    for (const authorization of [undefined, `Bearer ${TOKEN}x`, `Basic ${TOKEN}`, 'Bearer']) {
      const res = await health(served.url, authorization);
      expect(res.status).toBe(200);
      expect(res.json()).toEqual({ status: 'ok', info: STATUSES_ONLY, error: {}, details: STATUSES_ONLY });
    }
  });

  it('adds the response times of the backends and the latency of each idempotency tier for the admin token', async () => {
    const res = await health(served.url, `Bearer ${TOKEN}`);
    expect(res.status).toBe(200);
    expect(res.json().details).toEqual({
      database: { status: 'up', responseTime: expect.any(Number) },
      idempotency: {
        status: 'up',
        fast: { status: 'up', latencyMs: expect.any(Number) },
        durable: { status: 'up', latencyMs: expect.any(Number) },
      },
      redis: { status: 'up', responseTime: expect.any(Number) },
    });
  });
});

describe('GET /health without ADMIN_TOKEN', () => {
  const served = useOrdersApp(embeddedBackend);

  it('shows statuses only, whatever token is sent', async () => {
    const res = await health(served.url, `Bearer ${TOKEN}`);
    expect(res.status).toBe(200);
    expect(res.json().details).toEqual({
      database: { status: 'up' },
      idempotency: { status: 'up', fast: { status: 'up' }, durable: { status: 'up' } },
    });
  });
});
