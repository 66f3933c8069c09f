import { randomUUID } from 'node:crypto';
import { expectOneFreshTheRestBusyOrReplayed } from '../support/http/concurrency.js';
import { send } from '../support/http/send.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { startOrdersCluster, type OrdersCluster } from '../support/orders/orders-cluster.js';
import { ordersDatabases, type OrdersDatabase } from '../support/orders/orders-databases.js';
import { newTenant, orderBody } from '../support/orders/orders-fixtures.js';

/**
 * Races across processes: three instances of the compiled service on one Redis and one
 * PostgreSQL schema; each round sends 50 identical `POST /orders` at once, spread over the
 * instances. Every round creates exactly one order and one charge; every other answer is a 409
 * with `Retry-After` or a replay of the one 201.
 */
const INSTANCES = 3;
const ROUNDS = 10;
const CONCURRENT = 50;

describe.each(ordersDatabases)(
  `${INSTANCES} instances of the service on one Redis and one %s`,
  (_name, openDatabase) => {
    let redis: ThrowawayRedis;
    let db: OrdersDatabase;
    let cluster: OrdersCluster;

    beforeAll(async () => {
      db = await openDatabase('race_e2e');
      redis = await startRedisServer();
      cluster = await startOrdersCluster(INSTANCES, { ...db.env(), REDIS_URL: redis.url });
    }, 180_000);
    afterAll(async () => {
      await cluster?.stop();
      await redis?.stop();
      await db?.drop();
    });

    it(`${ROUNDS} rounds of ${CONCURRENT} concurrent identical POST /orders split across the instances: each round one order, one charge, the rest 409 + Retry-After or replays`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const tenantId = newTenant();
        const key = randomUUID();
        const body = orderBody();
        const results = await Promise.all(
          Array.from({ length: CONCURRENT }, (_, i) =>
            send(cluster.instances[i % INSTANCES].url, '/orders', { key, body, headers: { 'X-Tenant-ID': tenantId } }),
          ),
        );
        const fresh = expectOneFreshTheRestBusyOrReplayed(results);
        expect(fresh.status).toBe(201);
        expect(await db.orderIdsOf(tenantId)).toEqual([fresh.json().id]);
        expect(await db.count('payments', tenantId)).toBe(1);
      }
    }, 120_000);
  },
);
