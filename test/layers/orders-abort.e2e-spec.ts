import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { INestApplication } from '@nestjs/common';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { countForTenant } from '../support/orders/orders-db.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';
import { send, type HttpResult } from '../support/http/send.js';
import { sleep } from '../support/timing.js';
import { connectPostgresOrFail, queryTestDatabase, waitForLockWaiters } from '../support/servers/postgres.js';
import { waitUntil } from '../support/timing.js';
import { sendLeavable } from './support/leavable-request.js';

/**
 * The sample, as issue 18 found it broken: a client leaves `POST /orders` while it runs, then the
 * charge fails. The handler failed, so its 500 frees the key (docs/contract.md B.7 rules 17, 17a); the
 * client is never told the order exists, and a retry with the same key creates it once.
 *
 * The fault is the payment provider's: its `payments` table gets a trigger (in this suite's
 * throwaway schema, no sample code) that, for a tenant listed in `charge_faults`, waits on an
 * advisory lock the test holds (the charge is "running"), then refuses the charge with an error.
 */
const [, setUpPostgresAndRedis] = backends[0];

describe('POST /orders: the client leaves, then the charge fails (PostgreSQL + Redis)', () => {
  let backend: Backend;
  let app: INestApplication;
  let url: string;
  let schema: string;

  const headersOf = (tenantId: string) => ({ 'X-Tenant-ID': tenantId });
  const list = async (tenantId: string, path: '/orders' | '/payments') =>
    (await send(url, path, { method: 'GET', headers: headersOf(tenantId) })).json<{ id: string }[]>();

  beforeAll(async () => {
    backend = await setUpPostgresAndRedis();
    schema = backend.env.DATABASE_SCHEMA!;
    // No background transactions besides the request's (the queue worker, the outbox relay).
    app = await createOrdersApp({
      env: { ...backend.env, QUEUE_WORKER: 'false', OUTBOX_POLL_MS: '600000' },
      logger: false,
    });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    await queryTestDatabase(`CREATE TABLE "${schema}".charge_faults (tenant_id varchar(36) PRIMARY KEY)`);
    await queryTestDatabase(`
      CREATE FUNCTION "${schema}".refuse_faulted_charge() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF EXISTS (SELECT 1 FROM "${schema}".charge_faults WHERE tenant_id = NEW.tenant_id) THEN
          PERFORM pg_advisory_xact_lock(hashtext(NEW.tenant_id));
          RAISE EXCEPTION 'card provider unavailable';
        END IF;
        RETURN NEW;
      END $$`);
    await queryTestDatabase(
      `CREATE TRIGGER refuse_faulted_charge BEFORE INSERT ON "${schema}".payments FOR EACH ROW EXECUTE FUNCTION "${schema}".refuse_faulted_charge()`,
    );
  });
  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  it('the failed charge frees the key: the retry gets a fresh 201, and GET /orders shows exactly one order with one charge', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const order = () => send(url, '/orders', { key, body, headers: headersOf(tenantId) });
    const provider = await connectPostgresOrFail();
    let busy: HttpResult;
    try {
      await provider.query(`INSERT INTO "${schema}".charge_faults (tenant_id) VALUES ($1)`, [tenantId]);
      await provider.query('SELECT pg_advisory_lock(hashtext($1))', [tenantId]);
      const first = sendLeavable(url, '/orders', body, { ...headersOf(tenantId), 'Idempotency-Key': key });
      // The order is written and its charge waits at the provider, inside the handler's transaction.
      expect(await waitForLockWaiters(provider, schema, 'payments')).toBe(1);
      first.leave();
      expect(await first.answer).toBe('left');
      const server = app.getHttpServer() as Server;
      await waitUntil(
        () => new Promise<boolean>((resolve) => server.getConnections((_error, count) => resolve(count === 0))),
        5_000,
        'the app has seen the client leave',
      );
      busy = await order();
      // The provider recovers for later charges; the waiting one has already been judged.
      await provider.query(`DELETE FROM "${schema}".charge_faults WHERE tenant_id = $1`, [tenantId]);
    } finally {
      await provider.query('SELECT pg_advisory_unlock(hashtext($1))', [tenantId]);
      await provider.end();
    }
    expect(busy.status).toBe(409);
    expect(busy.json().code).toBe('idempotency_request_in_progress');

    // The charge now fails; once the handler has settled, the retry runs it afresh.
    let retry = await order();
    const deadline = Date.now() + 10_000;
    while (retry.status === 409 && retry.json().code === 'idempotency_request_in_progress' && Date.now() < deadline) {
      await sleep(50);
      retry = await order();
    }
    expect({ status: retry.status, code: retry.status === 201 ? undefined : retry.json().code }).toEqual({
      status: 201,
      code: undefined,
    });
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    const orders = await list(tenantId, '/orders');
    expect(orders.map(({ id }) => id)).toEqual([retry.json().id]);
    expect(await list(tenantId, '/payments')).toHaveLength(1);
    expect(await countForTenant(schema, 'orders', tenantId)).toBe(1);
    expect(await countForTenant(schema, 'payments', tenantId)).toBe(1);

    const replay = await order();
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(retry.body)).toBe(true);
  });
});
