import { type MigrationInterface, type QueryRunner, Table, TableIndex } from 'typeorm';

const uuid = (name: string) => ({ name, type: 'varchar', length: '36', isNullable: false });
const epochMs = (name: string) => ({ name, type: 'bigint', isNullable: false });

/**
 * Orders, their items and the payment provider's charges. Only column types that PostgreSQL
 * and SQLite (sql.js) share: `varchar(n)`, `integer`, `bigint` (cents, epoch milliseconds).
 */
export class CreateOrdersAndPayments1764000000000 implements MigrationInterface {
  name = 'CreateOrdersAndPayments1764000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.createTable(
      new Table({
        name: 'orders',
        columns: [
          { ...uuid('id'), isPrimary: true },
          uuid('tenant_id'),
          uuid('customer_id'),
          { name: 'currency', type: 'varchar', length: '3', isNullable: false },
          { name: 'total_cents', type: 'bigint', isNullable: false },
          { name: 'status', type: 'varchar', length: '16', isNullable: false },
          { ...uuid('payment_id'), isNullable: true },
          epochMs('created_at_ms'),
        ],
        indices: [
          new TableIndex({ name: 'IDX_orders_tenant_created', columnNames: ['tenant_id', 'created_at_ms', 'id'] }),
        ],
      }),
    );
    await queryRunner.createTable(
      new Table({
        name: 'order_items',
        columns: [
          { ...uuid('order_id'), isPrimary: true },
          { name: 'position', type: 'integer', isPrimary: true, isNullable: false },
          { name: 'sku', type: 'varchar', length: '64', isNullable: false },
          { name: 'quantity', type: 'integer', isNullable: false },
          { name: 'unit_price_cents', type: 'integer', isNullable: false },
        ],
        foreignKeys: [
          {
            name: 'FK_order_items_order',
            columnNames: ['order_id'],
            referencedTableName: 'orders',
            referencedColumnNames: ['id'],
            onDelete: 'CASCADE',
          },
        ],
      }),
    );
    await queryRunner.createTable(
      new Table({
        name: 'payments',
        columns: [
          { ...uuid('id'), isPrimary: true },
          uuid('tenant_id'),
          uuid('order_id'),
          { name: 'amount_cents', type: 'bigint', isNullable: false },
          { name: 'currency', type: 'varchar', length: '3', isNullable: false },
          { name: 'provider_key', type: 'varchar', length: '255', isNullable: false },
          epochMs('created_at_ms'),
        ],
        indices: [
          new TableIndex({ name: 'UQ_payments_provider_key', columnNames: ['provider_key'], isUnique: true }),
          new TableIndex({ name: 'IDX_payments_tenant_created', columnNames: ['tenant_id', 'created_at_ms', 'id'] }),
        ],
      }),
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropTable('payments');
    await queryRunner.dropTable('order_items');
    await queryRunner.dropTable('orders');
  }
}
