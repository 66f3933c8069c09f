import { type MigrationInterface, type QueryRunner, Table, TableColumn, TableIndex } from 'typeorm';

/**
 * The payment provider's webhook events: `payment_events` (one row per event id applied) and
 * `payments.status` (moved forward by the events). Column types shared by PostgreSQL and SQLite
 * only, as in the first migration. On SQLite, TypeORM adds the column by rebuilding the table
 * (its indexes included).
 */
export class CreatePaymentEvents1764200000000 implements MigrationInterface {
  name = 'CreatePaymentEvents1764200000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.addColumn(
      'payments',
      new TableColumn({ name: 'status', type: 'varchar', length: '16', isNullable: false, default: "'charged'" }),
    );
    await queryRunner.createTable(
      new Table({
        name: 'payment_events',
        columns: [
          // The provider's event id, as sent (`evt_...`): one row per event, ever.
          { name: 'id', type: 'varchar', length: '255', isPrimary: true, isNullable: false },
          { name: 'tenant_id', type: 'varchar', length: '36', isNullable: false },
          { name: 'payment_id', type: 'varchar', length: '36', isNullable: false },
          { name: 'type', type: 'varchar', length: '64', isNullable: false },
          { name: 'received_at_ms', type: 'bigint', isNullable: false },
        ],
        indices: [
          new TableIndex({
            name: 'IDX_payment_events_payment',
            columnNames: ['tenant_id', 'payment_id', 'received_at_ms'],
          }),
        ],
      }),
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropTable('payment_events');
    await queryRunner.dropColumn('payments', 'status');
  }
}
