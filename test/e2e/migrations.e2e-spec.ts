import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { dataSourceOptionsFor } from '../../apps/orders/src/database/data-source-options.js';
import { migrateDatabase } from '../../apps/orders/src/database/migrate.js';
import {
  connectPostgresOrFail,
  dropSchema,
  queryTestDatabase,
  TEST_DATABASE_URL,
  throwawaySchemaName,
} from '../support/servers/postgres.js';

/**
 * The migrations on both databases, and the advisory lock that lets several instances migrate
 * one empty PostgreSQL schema at the same moment. (Without the lock, concurrent runs fail with
 * `duplicate key value violates unique constraint "pg_type_typname_nsp_index"`.)
 */
describe('migrations', () => {
  beforeAll(() => Logger.overrideLogger(['error', 'fatal']));

  const TABLES = [
    'idempotency_records',
    'migrations',
    'order_items',
    'order_notifications',
    'orders',
    'outbox_events',
    'payment_events',
    'payments',
  ];
  const APPLIED = [
    'AddIdempotencyRecordsInProgressIndex1764150000000',
    'AddOutboxMessageKey1764400000000',
    'CreateIdempotencyRecords1764100000000',
    'CreateOrdersAndPayments1764000000000',
    'CreateOutboxAndNotifications1764300000000',
    'CreatePaymentEvents1764200000000',
  ];
  const undoAll = async (source: DataSource) => {
    for (let i = 0; i < APPLIED.length; i++) await source.undoLastMigration();
  };
  /**
   * The payment, outbox and notification tables match their entities: TypeORM's schema builder
   * finds nothing to change in them. (It does want to rename the items' foreign key, which the
   * entity leaves unnamed.)
   */
  const expectPaymentEntitiesMatchSchema = async (source: DataSource) => {
    const pending = await source.driver.createSchemaBuilder().log();
    expect(pending.upQueries.map((q) => q.query).filter((query) => /payment|outbox|notification/i.test(query))).toEqual(
      [],
    );
  };

  describe('on PostgreSQL', () => {
    let schema: string;
    const sources: DataSource[] = [];
    const newSource = async () => {
      const source = await new DataSource(
        dataSourceOptionsFor({ kind: 'postgres', url: TEST_DATABASE_URL, schema }),
      ).initialize();
      sources.push(source);
      return source;
    };
    const tablesOf = async (name: string) =>
      (
        await queryTestDatabase<{ table_name: string }>(
          'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name',
          [name],
        )
      ).map((r) => r.table_name);

    beforeAll(async () => {
      await (await connectPostgresOrFail()).end();
    });

    beforeEach(() => {
      schema = throwawaySchemaName('orders_migrations');
    });

    afterEach(async () => {
      await Promise.all(sources.splice(0).map((s) => s.destroy()));
      await dropSchema(schema);
    });

    it('four instances migrating one schema that does not exist yet at the same moment all succeed, once', async () => {
      const all = await Promise.all([1, 2, 3, 4].map(() => newSource()));
      await Promise.all(all.map((source) => migrateDatabase(source)));
      expect(await tablesOf(schema)).toEqual(TABLES);
      const applied = await queryTestDatabase<{ name: string }>(`SELECT name FROM "${schema}".migrations`);
      expect(applied.map((r) => r.name).sort()).toEqual(APPLIED);
    });

    it('runs again as a no-op, and reverts cleanly', async () => {
      const source = await newSource();
      await migrateDatabase(source);
      await migrateDatabase(source);
      expect(await tablesOf(schema)).toEqual(TABLES);
      await expectPaymentEntitiesMatchSchema(source);
      await undoAll(source);
      expect(await tablesOf(schema)).toEqual(['migrations']);
    });

    it('enforces the unique provider key and the item → order foreign key', async () => {
      const source = await newSource();
      await migrateDatabase(source);
      const insertPayment = (id: string) =>
        source.query(
          'INSERT INTO payments (id, tenant_id, order_id, amount_cents, currency, provider_key, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)',
          [id, 't', 'o', 3_000_000_000, 'EUR', 'same-key', Date.now()],
        );
      await insertPayment('p1');
      await expect(insertPayment('p2')).rejects.toThrow(/UQ_payments_provider_key|unique/i);
      await expect(
        source.query(
          'INSERT INTO order_items (order_id, position, sku, quantity, unit_price_cents) VALUES ($1, 0, $2, 1, 1)',
          ['no-such-order', 'A'],
        ),
      ).rejects.toThrow(/foreign key/i);
    });
  });

  describe('on sql.js', () => {
    let dir: string;
    let source: DataSource | undefined;

    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'orders-migrations-'));
    });

    afterEach(async () => {
      await source?.destroy();
      source = undefined;
      await rm(dir, { recursive: true, force: true });
    });

    it('creates the tables in a new file, runs again as a no-op, and reverts cleanly', async () => {
      const file = join(dir, 'nested', 'orders.sqlite');
      source = await new DataSource(dataSourceOptionsFor({ kind: 'embedded', file })).initialize();
      await migrateDatabase(source);
      await migrateDatabase(source);
      const tables = async () =>
        (
          await source!.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
          )
        ).map((r: { name: string }) => r.name);
      expect(await tables()).toEqual(TABLES);
      const big = 3_000_000_000;
      await source.query(
        'INSERT INTO payments (id, tenant_id, order_id, amount_cents, currency, provider_key, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)',
        ['p1', 't', 'o', big, 'EUR', 'k', Date.now()],
      );
      await expect(
        source.query(
          'INSERT INTO payments (id, tenant_id, order_id, amount_cents, currency, provider_key, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)',
          ['p2', 't', 'o', 1, 'EUR', 'k', Date.now()],
        ),
      ).rejects.toThrow(/UNIQUE/);
      expect((await source.query('SELECT amount_cents FROM payments'))[0].amount_cents).toBe(big);
      expect((await source.query('SELECT status FROM payments'))[0].status).toBe('charged');
      await expectPaymentEntitiesMatchSchema(source);
      await undoAll(source);
      expect(await tables()).toEqual(['migrations']);
    });
  });
});
