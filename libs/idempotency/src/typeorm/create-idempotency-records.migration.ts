import { Table, TableIndex, type MigrationInterface, type QueryRunner, type TableColumnOptions } from 'typeorm';
import { AddIdempotencyRecordsInProgressIndex1764150000000 } from './add-idempotency-in-progress-index.migration.js';
import {
  IDEMPOTENCY_RECORDS_EXPIRES_INDEX,
  IDEMPOTENCY_RECORDS_PRIMARY_KEY,
  IDEMPOTENCY_RECORDS_TABLE,
  isMysqlDataSourceType,
  isSupportedDataSourceType,
  unsupportedDataSourceType,
} from './idempotency-record.entity.js';

const required = (name: string, type: string, length?: string): TableColumnOptions => ({
  name,
  type,
  isNullable: false,
  ...(length !== undefined && { length }),
});
/** MySQL: key, tokens and fingerprints compare byte for byte (`ascii_bin`), never case-insensitively. */
const binaryText = (column: TableColumnOptions, mysql: boolean): TableColumnOptions =>
  mysql ? { ...column, charset: 'ascii', collation: 'ascii_bin' } : column;
/** The body column's type: `bytea`, `longblob` (MySQL's `blob` stops at 64 KiB) or SQLite's `blob`. */
const BODY_TYPE = { postgres: 'bytea', mysql: 'longblob', sqlite: 'blob' } as const;
/** The headers' JSON: MySQL's `text` stops at 64 KiB, where PostgreSQL's and SQLite's have no limit. */
const HEADERS_TYPE = { postgres: 'text', mysql: 'longtext', sqlite: 'text' } as const;
const optional = (name: string, type: string): TableColumnOptions => ({ name, type, isNullable: true });

/**
 * Creates the durable table `idempotency_records` and its `expires_at_ms` index, on PostgreSQL,
 * MySQL / MariaDB and SQLite (sql.js). It creates exactly what the entities describe, so TypeORM's schema
 * diff finds nothing to change afterwards. Add it to your DataSource's `migrations` (with your
 * own, in any order: TypeORM orders them by the timestamp in the name) and run them as you run
 * yours. `down` drops the table with every record in it.
 *
 * Column types are the ones both databases share (`varchar(n)`, `integer`, `bigint`, `text`,
 * `boolean`); the body is `bytea` on PostgreSQL, `longblob` on MySQL and `blob` on SQLite. On
 * MySQL the headers are `longtext`, and the key, owner token and fingerprint columns are `ascii`
 * with the `ascii_bin` collation.
 *
 * @example
 * new DataSource({ ..., migrations: [...MY_MIGRATIONS, ...IDEMPOTENCY_TYPEORM_MIGRATIONS] })
 * @publicApi
 */
export class CreateIdempotencyRecords1764100000000 implements MigrationInterface {
  name = 'CreateIdempotencyRecords1764100000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const type = queryRunner.dataSource.options.type;
    if (!isSupportedDataSourceType(type)) throw unsupportedDataSourceType(type);
    const mysql = isMysqlDataSourceType(type);
    const dialect = type === 'postgres' ? 'postgres' : mysql ? 'mysql' : 'sqlite';
    await queryRunner.createTable(
      new Table({
        name: IDEMPOTENCY_RECORDS_TABLE,
        columns: [
          binaryText(
            {
              ...required('key', 'varchar', '64'),
              isPrimary: true,
              primaryKeyConstraintName: IDEMPOTENCY_RECORDS_PRIMARY_KEY,
            },
            mysql,
          ),
          required('state', 'varchar', '16'),
          binaryText(required('fingerprint', 'varchar', '64'), mysql),
          binaryText(required('owner_token', 'varchar', '64'), mysql),
          required('fencing_token', 'integer'),
          required('created_at_ms', 'bigint'),
          required('lease_expires_at_ms', 'bigint'),
          required('expires_at_ms', 'bigint'),
          optional('response_status', 'integer'),
          optional('response_headers', HEADERS_TYPE[dialect]),
          optional('response_body', BODY_TYPE[dialect]),
          { ...required('response_body_omitted', 'boolean'), default: type === 'postgres' ? 'false' : '0' },
        ],
        indices: [new TableIndex({ name: IDEMPOTENCY_RECORDS_EXPIRES_INDEX, columnNames: ['expires_at_ms'] })],
      }),
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.dropTable(IDEMPOTENCY_RECORDS_TABLE);
  }
}

/**
 * The migrations of the durable tier, oldest first.
 *
 * @publicApi
 */
export const IDEMPOTENCY_TYPEORM_MIGRATIONS: [
  typeof CreateIdempotencyRecords1764100000000,
  typeof AddIdempotencyRecordsInProgressIndex1764150000000,
] = [CreateIdempotencyRecords1764100000000, AddIdempotencyRecordsInProgressIndex1764150000000];
