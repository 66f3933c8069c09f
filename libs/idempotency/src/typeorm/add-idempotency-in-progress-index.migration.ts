import { TableIndex, type MigrationInterface, type QueryRunner } from 'typeorm';
import { IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX, IDEMPOTENCY_RECORDS_TABLE } from './idempotency-record.entity.js';

/**
 * Adds the index on `(state, created_at_ms)` that `listInProgress` (the admin's "stuck records"
 * view) reads, so the query never scans the table. A migration of its own rather than a change
 * to the first one: databases that already ran the first get it too.
 *
 * @publicApi
 */
export class AddIdempotencyRecordsInProgressIndex1764150000000 implements MigrationInterface {
  name = 'AddIdempotencyRecordsInProgressIndex1764150000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.createIndex(
      IDEMPOTENCY_RECORDS_TABLE,
      new TableIndex({ name: IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX, columnNames: ['state', 'created_at_ms'] }),
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropIndex(IDEMPOTENCY_RECORDS_TABLE, IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX);
  }
}
