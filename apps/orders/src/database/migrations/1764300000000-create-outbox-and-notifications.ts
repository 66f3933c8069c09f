import { type MigrationInterface, type QueryRunner, Table, TableIndex } from 'typeorm';

/**
 * The transactional outbox (`outbox_events`) and the confirmations sent for orders
 * (`order_notifications`). Column types shared by PostgreSQL and SQLite only.
 */
export class CreateOutboxAndNotifications1764300000000 implements MigrationInterface {
  name = 'CreateOutboxAndNotifications1764300000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const uuid = (name: string) => ({ name, type: 'varchar', length: '36', isNullable: false });
    await queryRunner.createTable(
      new Table({
        name: 'outbox_events',
        columns: [
          { ...uuid('id'), isPrimary: true },
          { name: 'type', type: 'varchar', length: '64', isNullable: false },
          uuid('tenant_id'),
          uuid('order_id'),
          { name: 'created_at_ms', type: 'bigint', isNullable: false },
          { name: 'dispatched_at_ms', type: 'bigint', isNullable: true },
        ],
        indices: [
          new TableIndex({ name: 'IDX_outbox_events_pending', columnNames: ['dispatched_at_ms', 'created_at_ms'] }),
        ],
      }),
    );
    await queryRunner.createTable(
      new Table({
        name: 'order_notifications',
        columns: [
          { ...uuid('id'), isPrimary: true },
          uuid('tenant_id'),
          uuid('order_id'),
          uuid('event_id'),
          { name: 'kind', type: 'varchar', length: '32', isNullable: false },
          { name: 'sent_at_ms', type: 'bigint', isNullable: false },
        ],
        indices: [
          new TableIndex({
            name: 'IDX_order_notifications_order',
            columnNames: ['tenant_id', 'order_id', 'sent_at_ms'],
          }),
        ],
      }),
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropTable('order_notifications');
    await queryRunner.dropTable('outbox_events');
  }
}
