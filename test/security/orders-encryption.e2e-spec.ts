import { randomBytes, randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { createOrdersApp } from '../../apps/orders/src/app.factory.js';
import { backends, type Backend } from '../support/orders/backends.js';
import { newTenant, orderBody, PROBLEM_BASE } from '../support/orders/orders-fixtures.js';
import { send } from '../support/http/send.js';
import { queryTestDatabase } from '../support/servers/postgres.js';
import { holding, rowsAsStoredBytes } from './support/stored-bytes.js';

const [, withServers] = backends[0];

/**
 * The orders service with `IDEMPOTENCY_ENCRYPTION_KEYS` on PostgreSQL and Redis: the stored
 * order responses are sealed in the durable table, replays still work, and a restart without
 * the sealing key fails closed instead of charging again.
 */
describe('orders service with IDEMPOTENCY_ENCRYPTION_KEYS (PostgreSQL + Redis)', () => {
  let backend: Backend | undefined;
  let app: INestApplication | undefined;
  const ring = (id: string) => `${id}:${randomBytes(32).toString('base64')}`;

  const start = async (keys: string): Promise<string> => {
    app = await createOrdersApp({ env: { ...backend!.env, IDEMPOTENCY_ENCRYPTION_KEYS: keys }, logger: false });
    await app.listen(0, '127.0.0.1');
    return (await app.getUrl()).replace('[::1]', '127.0.0.1');
  };

  beforeAll(async () => {
    backend = await withServers();
  });
  afterAll(async () => {
    await app?.close();
    await backend?.tearDown();
  });

  it('stores sealed order responses, replays them, and fails closed once the key is gone', async () => {
    const tenantId = newTenant();
    const key = randomUUID();
    const body = orderBody();
    const headers = { 'X-Tenant-ID': tenantId };
    let url = await start(ring('k1'));
    const first = await send(url, '/orders', { key, body, headers });
    expect(first.status).toBe(201);
    const replay = await send(url, '/orders', { key, body, headers });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(first.body)).toBe(true);

    const orderId: string = first.json().id;
    const rows = rowsAsStoredBytes(
      await queryTestDatabase(`SELECT * FROM "${backend!.env.DATABASE_SCHEMA}".idempotency_records`),
    );
    expect(rows.length).toBeGreaterThan(0);
    expect(holding(rows, orderId)).toEqual([]);
    expect(holding(rows, body.customerId)).toEqual([]);

    await app!.close();
    url = await start(ring('k2'));
    const refused = await send(url, '/orders', { key, body, headers });
    expect(refused.status).toBe(500);
    expect(refused.json()).toMatchObject({ type: `${PROBLEM_BASE}idempotency-record-unreadable`, status: 500 });
    const orders = await send(url, '/orders', { method: 'GET', headers });
    expect(orders.json()).toHaveLength(1);
  });
});
