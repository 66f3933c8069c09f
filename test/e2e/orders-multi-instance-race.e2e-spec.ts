import { randomUUID } from 'node:crypto';
import { expectOneFreshTheRestBusyOrReplayed } from '../support/http/concurrency.js';
import { send } from '../support/http/send.js';
import {
  connectPostgresOrFail,
  dropSchema,
  TEST_DATABASE_URL,
  throwawaySchemaName,
} from '../support/servers/postgres.js';
import { startRedisServer, type ThrowawayRedis } from '../support/servers/redis-server.js';
import { startOrdersCluster, type OrdersCluster } from '../support/orders/orders-cluster.js';
import { countForTenant, orderIdsOf } from '../support/orders/orders-db.js';
import { expectedTableKind, idempotencyTableKind, idempotencyTables } from '../support/orders/backends.js';
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

const RACE = `${INSTANCES} instances of the service on one Redis and one PostgreSQL (%s)`;

describe.each(idempotencyTables)(RACE, (_table, tableEnv) => {
  let redis: ThrowawayRedis;
  let schema: string;
  let cluster: OrdersCluster;

  beforeAll(async () => {
    await (await connectPostgresOrFail()).end();
    redis = await startRedisServer();
    schema = throwawaySchemaName('race_e2e');
    cluster = await startOrdersCluster(INSTANCES, {
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: schema,
      REDIS_URL: redis.url,
      ...tableEnv,
    });
  }, 180_000);
  afterAll(async () => {
    await cluster?.stop();
    await redis?.stop();
    if (schema) await dropSchema(schema);
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
      expect(await orderIdsOf(schema, tenantId)).toEqual([fresh.json().id]);
      expect(await countForTenant(schema, 'payments', tenantId)).toBe(1);
    }
    expect(await idempotencyTableKind(schema)).toBe(expectedTableKind(tableEnv));
  }, 120_000);
});
