import { randomUUID } from 'node:crypto';
import { buildOrdersAppOnce, startOrdersProcess, type OrdersProcess } from '../support/orders/app-process.js';
import { ordersDatabases, type OrdersDatabase } from '../support/orders/orders-databases.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

/**
 * A process killed while its handler is inside the idempotency transaction (DESIGN step 7): the
 * database rolls the transaction back, so nothing of the run committed; once the dead claim's
 * lease has lapsed, the retry takes the record over and runs the order exactly once.
 */
const LEASE_MS = 1500;

describe.each(ordersDatabases)(
  'sample service on %s killed (SIGKILL) inside its transaction',
  (_name, openDatabase) => {
    let db: OrdersDatabase;
    let redis: ThrowawayRedis;
    let env: Record<string, string>;
    const processes: OrdersProcess[] = [];

    const count = (table: 'orders' | 'payments', tenantId: string) => db.count(table, tenantId);
    const post = (proc: OrdersProcess, tenantId: string, key: string, body: unknown) =>
      fetch(`${proc.url}/orders`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Tenant-ID': tenantId, 'Idempotency-Key': key },
        body: JSON.stringify(body),
      });

    beforeAll(async () => {
      db = await openDatabase('crash_e2e');
      await buildOrdersAppOnce();
      redis = await startRedisServer();
      env = {
        ...db.env(),
        REDIS_URL: redis.url,
        IDEMPOTENCY_LEASE_MS: String(LEASE_MS),
      };
    }, 120_000);
    afterAll(async () => {
      for (const proc of processes) await proc.stop();
      await redis?.stop();
      await db?.drop();
    });

    it('after the kill and the lease, the retry answers 201 and exactly one order and one charge exist', async () => {
      const first = await startOrdersProcess({ env });
      processes.push(first);
      const tenantId = newTenant();
      const key = randomUUID();
      const body = orderBody();

      // Hold the handler inside its transaction: its payment insert waits on this lock.
      const locker = await db.lockTable('payments');
      const pending = post(first, tenantId, key, body).then(
        (res) => `answered ${res.status}`,
        () => 'connection lost',
      );
      const waiting = await locker.waiters(10_000);
      expect(waiting).toBe(1);

      const exited = new Promise((resolve) => first.child.once('exit', resolve));
      first.child.kill('SIGKILL');
      await exited;
      await locker.release();
      expect(await pending).toBe('connection lost');
      expect(await count('orders', tenantId)).toBe(0);
      expect(await count('payments', tenantId)).toBe(0);

      const second = await startOrdersProcess({ env });
      processes.push(second);
      await new Promise((r) => setTimeout(r, LEASE_MS + 300));
      const retry = await post(second, tenantId, key, body);
      expect(retry.status).toBe(201);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      const created = (await retry.json()) as { id: string };
      expect(await count('orders', tenantId)).toBe(1);
      expect(await count('payments', tenantId)).toBe(1);

      const again = await post(second, tenantId, key, body);
      expect(again.status).toBe(201);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(((await again.json()) as { id: string }).id).toBe(created.id);
    }, 60_000);
  },
);
