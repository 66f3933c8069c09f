/**
 * `nestjs-idempotency/typeorm`: the durable tier on TypeORM (PostgreSQL, MySQL / MariaDB, or sql.js when embedded).
 * The only part of the library that imports `typeorm`, so an application without it never
 * loads it.
 */
export { TypeOrmIdempotencyStore } from './typeorm-idempotency.store.js';
export type { IdempotencyPartitioning, TypeOrmIdempotencyStoreOptions } from './typeorm-idempotency-store.options.js';
export type { OutsideWritesPolicy, PropagateTransaction } from './route-transactions.js';
export {
  IDEMPOTENCY_RECORDS_EXPIRES_INDEX,
  IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX,
  IDEMPOTENCY_RECORDS_PRIMARY_KEY,
  IDEMPOTENCY_RECORDS_TABLE,
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IdempotencyRecordEntity,
  MysqlIdempotencyRecordEntity,
  SqliteIdempotencyRecordEntity,
  idempotencyTypeOrmEntities,
  type IdempotencyDataSourceType,
} from './idempotency-record.entity.js';
export {
  CreateIdempotencyRecords1764100000000,
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
} from './create-idempotency-records.migration.js';
export { AddIdempotencyRecordsInProgressIndex1764150000000 } from './add-idempotency-in-progress-index.migration.js';
export {
  CreatePartitionedIdempotencyRecords1764160000000,
  IDEMPOTENCY_TYPEORM_PARTITIONED_MIGRATIONS,
} from './create-partitioned-idempotency-records.migration.js';
