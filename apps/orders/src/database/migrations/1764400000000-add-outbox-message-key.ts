import { type MigrationInterface, type QueryRunner, TableColumn } from 'typeorm';

/**
 * `outbox_events.message_key`: the idempotency key the event carries to its consumers (the
 * `derivedKey('order.created')` of the request that wrote it). Null on events written before.
 */
export class AddOutboxMessageKey1764400000000 implements MigrationInterface {
  name = 'AddOutboxMessageKey1764400000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.addColumn(
      'outbox_events',
      new TableColumn({ name: 'message_key', type: 'varchar', length: '128', isNullable: true }),
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropColumn('outbox_events', 'message_key');
  }
}
