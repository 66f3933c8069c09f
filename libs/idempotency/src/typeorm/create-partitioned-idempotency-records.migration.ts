import type { MigrationInterface, QueryRunner } from 'typeorm';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { dropPartitionedTableDdl, partitionedNames, partitionedTableDdl } from './partitioned-records.sql.js';

/**
 * Creates `idempotency_records` as a table RANGE-partitioned by `created_at_ms`, with the claim
 * function the partitioned store calls (PostgreSQL only). Use it INSTEAD of
 * `IDEMPOTENCY_TYPEORM_MIGRATIONS`, with a store given `partitioning: { partitionMs }`; the store
 * creates the partitions ahead of the clock and its `deleteExpired` (the module's reaper) drops
 * the ones whose rows have all expired (docs/capacity.md, "The partitioned table"). `down` drops
 * the table with every partition and record, and the function.
 *
 * @example
 * new DataSource({ type: 'postgres', ..., migrations: [...MY_MIGRATIONS, ...IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS] })
 * @publicApi
 */
export class CreatePartitionedIdempotencyRecords1764160000000 implements MigrationInterface {
  name = 'CreatePartitionedIdempotencyRecords1764160000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    for (const sql of partitionedTableDdl(namesOf(queryRunner))) await queryRunner.query(sql);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    for (const sql of dropPartitionedTableDdl(namesOf(queryRunner))) await queryRunner.query(sql);
  }
}

function namesOf(queryRunner: QueryRunner) {
  const type = queryRunner.connection.options.type;
  if (type !== 'postgres') {
    throw new IdempotencyConfigurationError(
      `The partitioned idempotency table is for PostgreSQL; this DataSource is ${String(type)}. Use IDEMPOTENCY_TYPEORM_MIGRATIONS.`,
    );
  }
  return partitionedNames(queryRunner.connection.driver as { schema?: string; escape(name: string): string });
}

/**
 * The migrations of the partitioned durable table (PostgreSQL), in place of `IDEMPOTENCY_TYPEORM_MIGRATIONS`.
 *
 * @publicApi
 */
export const IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS: [typeof CreatePartitionedIdempotencyRecords1764160000000] = [
  CreatePartitionedIdempotencyRecords1764160000000,
];
