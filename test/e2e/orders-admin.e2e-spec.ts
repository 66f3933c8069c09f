import { randomBytes, randomUUID } from 'node:crypto';
import { DurableIdempotencyStore, IdempotencyStore, type StoredResponse } from 'nestjs-idempotency';
import { IdempotencyAdmin } from 'nestjs-idempotency/admin';
import { send, type HttpResult } from '../support/http/send.js';
import { backends } from '../support/orders/backends.js';
import { useOrdersApp } from '../support/orders/orders-app.js';
import { newTenant, orderBody, PROBLEM_BASE } from '../support/orders/orders-fixtures.js';
import { RecordingLogger } from '../support/recording-logger.js';

const TOKEN = 'adm_e2e_0123456789abcdef0123456789abcdef';
const ACTOR = 'alice@ops';
const OPERATION = 'orders.create';
/**
 * What `POST /orders` answers while the hanging claim holds its key: the claim's fingerprint is
 * not the request's, and a mismatch takes precedence over in-progress (docs/contract.md B.13 item 5).
 */
const BLOCKED = 422;

const [serversName, serversBackend] = backends[0];
const [, embeddedBackend] = backends[1];

/**
 * The opt-in `/admin/idempotency` routes of the sample service on a real socket, on PostgreSQL
 * and Redis: every route refuses a request without the right bearer token, looks records up in
 * both tiers, lists stuck ones and force-releases one (audited, fencing its owner).
 */
describe(`admin routes on ${serversName}`, () => {
  const logger = new RecordingLogger();
  const served = useOrdersApp(serversBackend, { ADMIN_TOKEN: TOKEN }, logger);

  const admin = (path: string, options: { method?: string; body?: unknown; headers?: Record<string, string> } = {}) =>
    send(served.url, `/admin/idempotency${path}`, {
      method: options.method ?? 'GET',
      body: options.body,
      headers: { Authorization: `Bearer ${TOKEN}`, ...options.headers },
    });
  const createOrder = (tenantId: string, key: string, body = orderBody()) =>
    send(served.url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } });
  const expectProblem = (res: HttpResult, status: number, kind: string) => {
    expect(res.status).toBe(status);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(res.json()).toMatchObject({ type: PROBLEM_BASE + kind, status });
  };
  /**
   * Claims the record `POST /orders` would use for (tenant, key) in both tiers, as a handler that
   * hangs would hold it (through the stores' public API; `abandon()` frees it).
   */
  const hangingClaim = async (tenantId: string, key: string) => {
    const keyId = served.app.get(IdempotencyAdmin).keyIdOf({ operation: OPERATION, tenant: tenantId, key });
    const request = {
      ownerToken: randomBytes(16).toString('base64url'),
      fingerprint: 'hanging-handler',
      leaseMs: 30_000,
      ttlMs: 86_400_000,
    };
    const tiers = [served.app.get(DurableIdempotencyStore), served.app.get(IdempotencyStore)];
    for (const tier of tiers) {
      const claimed = await tier.claim(keyId, request);
      if (claimed.kind !== 'claimed') throw new Error(`expected a claim, got ${claimed.kind}`);
    }
    const abandon = async () => {
      for (const tier of tiers) await tier.release(keyId, request.ownerToken);
    };
    /** What the owner's completion would do (durable tier first, as the engine does): true if any tier took it. */
    const complete = async (response: StoredResponse) => {
      const accepted = await Promise.all(tiers.map((tier) => tier.complete(keyId, request.ownerToken, response)));
      return accepted.some(Boolean);
    };
    return { keyId, ownerToken: request.ownerToken, abandon, complete };
  };

  describe('refusals', () => {
    const routes: [string, string, unknown][] = [
      ['GET', `/records?operation=${OPERATION}&key=k`, undefined],
      ['GET', '/in-progress?olderThanMs=0', undefined],
      ['POST', '/records/release', { operation: OPERATION, key: 'k', reason: 'test' }],
    ];
    it.each(routes)(
      '%s %s without a token, with a wrong one, or another scheme: 401 problem with a Bearer challenge',
      async (method, path, body) => {
        for (const authorization of [
          undefined,
          `Bearer ${TOKEN}x`,
          `Bearer ${TOKEN.slice(0, -1)}`,
          `Basic ${TOKEN}`,
          'Bearer',
        ]) {
          const headers: Record<string, string> = { 'X-Tenant-ID': newTenant(), 'X-Admin-Actor': ACTOR };
          if (authorization !== undefined) headers.Authorization = authorization;
          const res = await send(served.url, `/admin/idempotency${path}`, { method, body, headers });
          expectProblem(res, 401, 'admin-unauthorized');
          expect(res.headers.get('www-authenticate')).toBe('Bearer realm="orders-admin"');
        }
      },
    );

    it('a release without the token changes nothing: the stuck record still blocks the key', async () => {
      const tenantId = newTenant();
      const key = randomUUID();
      const claim = await hangingClaim(tenantId, key);
      const res = await send(served.url, '/admin/idempotency/records/release', {
        body: { operation: OPERATION, key, reason: 'no token' },
        headers: { 'X-Tenant-ID': tenantId, 'X-Admin-Actor': ACTOR },
      });
      expectProblem(res, 401, 'admin-unauthorized');
      expect((await createOrder(tenantId, key)).status).toBe(BLOCKED);
      await claim.abandon();
    });
  });

  it('are documented in /docs-json with the bearer scheme and X-Admin-Actor', async () => {
    const document = (await send(served.url, '/docs-json', { method: 'GET' })).json();
    const release = document.paths['/admin/idempotency/records/release'].post;
    expect(release.security).toEqual([{ 'admin-token': [] }]);
    expect(release.parameters).toContainEqual(
      expect.objectContaining({ name: 'X-Admin-Actor', in: 'header', required: true }),
    );
    expect(document.components.securitySchemes['admin-token']).toMatchObject({ type: 'http', scheme: 'bearer' });
  });

  describe('GET /admin/idempotency/records', () => {
    it('shows a completed record in both tiers, without the body unless asked', async () => {
      const tenantId = newTenant();
      const key = randomUUID();
      const created = await createOrder(tenantId, key);
      expect(created.status).toBe(201);
      const res = await admin(`/records?operation=${OPERATION}&key=${key}`, { headers: { 'X-Tenant-ID': tenantId } });
      expect(res.status).toBe(200);
      const found = res.json();
      expect(found.keyId).toBe(
        served.app
          .get(IdempotencyAdmin)
          .keyIdOf({ operation: OPERATION, tenant: tenantId, key, scope: ['tenant', 'operation'] }),
      );
      for (const tier of ['fast', 'durable']) {
        expect(found[tier]).toMatchObject({
          status: 'found',
          record: {
            state: 'completed',
            fencingToken: 1,
            leaseLapsed: false,
            response: { statusCode: 201, bodyOmitted: false },
          },
        });
        expect(found[tier].record.response.bodyBytes).toBe(created.body.length);
        expect(found[tier].record.response).not.toHaveProperty('bodyBase64');
        expect(found[tier].record.response.headers.location).toBe(created.headers.get('location'));
      }
      expect(JSON.stringify(found)).not.toContain(key);

      const withBody = await admin(`/records?keyId=${found.keyId}&includeBody=true`);
      expect(withBody.status).toBe(200);
      expect(Buffer.from(withBody.json().durable.record.response.bodyBase64, 'base64').equals(created.body)).toBe(true);
    });

    it('reads a quoted sf-string key as the client sent it, and says absent for an unknown one', async () => {
      const tenantId = newTenant();
      const key = randomUUID();
      expect((await createOrder(tenantId, `"${key}"`)).status).toBe(201);
      const quoted = await admin(`/records?operation=${OPERATION}&key=${encodeURIComponent(`"${key}"`)}`, {
        headers: { 'X-Tenant-ID': tenantId },
      });
      expect(quoted.json().fast.status).toBe('found');
      const unknown = await admin(`/records?operation=${OPERATION}&key=${randomUUID()}`, {
        headers: { 'X-Tenant-ID': tenantId },
      });
      expect(unknown.status).toBe(200);
      expect(unknown.json()).toMatchObject({ fast: { status: 'absent' }, durable: { status: 'absent' } });
    });

    it('refuses bad input with a problem: no tenant, no key, keyId with key, a malformed keyId or includeBody', async () => {
      expectProblem(await admin(`/records?operation=${OPERATION}&key=k`), 400, 'tenant-required');
      expectProblem(
        await admin(`/records?operation=${OPERATION}&key=k`, { headers: { 'X-Tenant-ID': 'nope' } }),
        400,
        'tenant-invalid',
      );
      const tenant = { headers: { 'X-Tenant-ID': newTenant() } };
      expectProblem(await admin(`/records?operation=${OPERATION}`, tenant), 400, 'validation-error');
      expectProblem(await admin(`/records?keyId=${'a'.repeat(32)}&key=k`, tenant), 400, 'validation-error');
      expectProblem(await admin('/records?keyId=XYZ', tenant), 400, 'validation-error');
      expectProblem(await admin(`/records?keyId=${'a'.repeat(32)}&includeBody=yes`, tenant), 400, 'validation-error');
      expectProblem(
        await admin(`/records?operation=${OPERATION}&key=${encodeURIComponent('"unterminated')}`, tenant),
        400,
        'validation-error',
      );
    });
  });

  describe('a stuck request, listed and force-released', () => {
    it('lists it in both tiers, releases it (audited, the owner fenced), and the key runs afresh', async () => {
      const tenantId = newTenant();
      const key = randomUUID();
      const claim = await hangingClaim(tenantId, key);
      const { keyId } = claim;
      expect((await createOrder(tenantId, key)).status).toBe(BLOCKED);

      const listed = await admin('/in-progress?olderThanMs=0&limit=1000');
      expect(listed.status).toBe(200);
      for (const tier of ['fast', 'durable'] as const) {
        const { status, error } = listed.json()[tier];
        expect({ tier, status, error }).toEqual({ tier, status: 'listed', error: undefined });
        const mine = listed.json()[tier].records.find((entry: { keyId: string }) => entry.keyId === keyId);
        expect(mine).toMatchObject({
          keyId,
          record: { state: 'in_progress', ownerToken: claim.ownerToken, leaseLapsed: false },
        });
      }
      const young = await admin('/in-progress?olderThanMs=3600000');
      expect(young.json().durable.records.map((entry: { keyId: string }) => entry.keyId)).not.toContain(keyId);

      const noActor = await admin('/records/release', { method: 'POST', body: { keyId, reason: 'INC-42' } });
      expectProblem(noActor, 400, 'validation-error');
      const noReason = await admin('/records/release', {
        method: 'POST',
        body: { keyId },
        headers: { 'X-Admin-Actor': ACTOR },
      });
      expectProblem(noReason, 400, 'validation-error');
      expect((await createOrder(tenantId, key)).status).toBe(BLOCKED);

      const released = await admin('/records/release', {
        method: 'POST',
        body: { operation: OPERATION, key, reason: 'INC-42: worker froze' },
        headers: { 'X-Tenant-ID': tenantId, 'X-Admin-Actor': ACTOR },
      });
      expect(released.status).toBe(200);
      expect(released.json()).toEqual({ keyId, fast: 'released', durable: 'released' });
      const audit = logger.at('warn').filter((line) => line.includes(`force-release key=${keyId}`));
      expect(audit).toHaveLength(1);
      expect(audit[0]).toContain(`actor="${ACTOR}"`);
      expect(audit[0]).toContain('reason="INC-42: worker froze"');
      expect(audit[0]).toContain('fast=released durable=released');
      expect(audit[0]).not.toContain(key);

      // The frozen owner wakes up: its completion is refused by the fencing check.
      expect(await claim.complete({ statusCode: 201, headers: {}, body: Buffer.from('{}') })).toBe(false);
      const fresh = await createOrder(tenantId, key);
      expect(fresh.status).toBe(201);
      expect(fresh.headers.get('idempotent-replayed')).toBeNull();
    });

    it('keeps a completed record unless includeCompleted, after which a retry runs again and only the provider key stops a second charge', async () => {
      const tenantId = newTenant();
      const key = randomUUID();
      const body = orderBody();
      const first = await createOrder(tenantId, key, body);
      expect(first.status).toBe(201);
      const release = (includeCompleted?: boolean) =>
        admin('/records/release', {
          method: 'POST',
          body: {
            operation: OPERATION,
            key,
            reason: 'wrong response stored',
            ...(includeCompleted !== undefined && { includeCompleted }),
          },
          headers: { 'X-Tenant-ID': tenantId, 'X-Admin-Actor': ACTOR },
        });
      const kept = await release();
      expect(kept.json()).toMatchObject({ fast: 'not-found', durable: 'not-found' });
      expect((await createOrder(tenantId, key, body)).headers.get('idempotent-replayed')).toBe('true');
      const deleted = await release(true);
      expect(deleted.json()).toMatchObject({ fast: 'released', durable: 'released' });
      // The handler runs again: the payment provider sees the same derived key and refuses it.
      const again = await createOrder(tenantId, key, body);
      expectProblem(again, 409, 'payment-key-reused');
      expect(again.headers.get('idempotent-replayed')).toBeNull();
      const orders = await send(served.url, '/orders', { method: 'GET', headers: { 'X-Tenant-ID': tenantId } });
      expect(orders.json().map((order: { id: string }) => order.id)).toEqual([first.json().id]);
    });

    it('refuses a bad age or limit with a problem', async () => {
      expectProblem(await admin('/in-progress?olderThanMs=-1'), 400, 'validation-error');
      expectProblem(await admin('/in-progress?olderThanMs=soon'), 400, 'validation-error');
      expectProblem(await admin('/in-progress?limit=0'), 400, 'validation-error');
    });
  });
});

describe('admin routes without ADMIN_TOKEN', () => {
  const served = useOrdersApp(embeddedBackend);

  it('do not exist: 404 problem, whatever token is sent', async () => {
    for (const path of ['/records?keyId=' + 'a'.repeat(32), '/in-progress']) {
      const res = await send(served.url, `/admin/idempotency${path}`, {
        method: 'GET',
        headers: { Authorization: `Bearer ${TOKEN}` },
      });
      expect(res.status).toBe(404);
      expect(res.json()).toMatchObject({ type: `${PROBLEM_BASE}not-found` });
    }
    const release = await send(served.url, '/admin/idempotency/records/release', {
      body: { keyId: 'a'.repeat(32), reason: 'x' },
    });
    expect(release.status).toBe(404);
  });
});
