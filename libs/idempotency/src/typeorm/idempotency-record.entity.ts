import {
  Column,
  Entity,
  Index,
  PrimaryColumn,
  type ColumnOptions,
  type DataSourceOptions,
  type ValueTransformer,
} from 'typeorm';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import type { IdempotencyRecordState } from '../interfaces/idempotency-record.interface.js';

/**
 * Name of the durable table. It is fixed: the store's SQL, the migration and the entities all
 * use it, and a name that could differ between them would let a store read a table that no
 * migration created. Put the table in another schema with the DataSource's `schema` option.
 *
 * @publicApi
 */
export const IDEMPOTENCY_RECORDS_TABLE = 'idempotency_records';

/** Index on `expires_at_ms`, for the reaper (`deleteExpired`). @publicApi */
export const IDEMPOTENCY_RECORDS_EXPIRES_INDEX = 'IDX_idempotency_records_expires';

/** Index on `(state, created_at_ms)`, for `listInProgress` (the admin's stuck-records view). @publicApi */
export const IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX = 'IDX_idempotency_records_in_progress';

/** Primary key constraint on `key`. @publicApi */
export const IDEMPOTENCY_RECORDS_PRIMARY_KEY = 'PK_idempotency_records';

/**
 * DataSource types the durable tier supports: PostgreSQL, MySQL 8 and MariaDB 10.11+ (both
 * through the `mysql2` driver), and SQLite through sql.js for the embedded mode. Others are
 * refused with an `IdempotencyConfigurationError` rather than run on SQL nobody tested there.
 *
 * @publicApi
 */
export type IdempotencyDataSourceType = 'postgres' | 'mysql' | 'mariadb' | 'sqljs';

/** @internal */
export function isSupportedDataSourceType(type: DataSourceOptions['type']): type is IdempotencyDataSourceType {
  return type === 'postgres' || isMysqlDataSourceType(type) || type === 'sqljs';
}

/** MySQL or MariaDB: TypeORM's two names for its `mysql2` driver. @internal */
export function isMysqlDataSourceType(type: DataSourceOptions['type']): type is 'mysql' | 'mariadb' {
  return type === 'mysql' || type === 'mariadb';
}

/**
 * `bigint` arrives from PostgreSQL as a string (it may exceed 2^53) and from SQLite as a number.
 * Epoch milliseconds stay far below 2^53, so both are read as a number; anything else is refused
 * instead of being rounded into a different instant.
 */
const epochMs: ValueTransformer = {
  to: (value: number | null | undefined) => value,
  from: (value: string | number | null) => {
    if (value === null) return null;
    const ms = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
    if (typeof ms !== 'number' || !Number.isSafeInteger(ms)) {
      throw new RangeError(`An epoch-ms column holds ${String(value)}, which is not a safe integer`);
    }
    return ms;
  },
};

/** sql.js returns a BLOB as a `Uint8Array`; the record's body is a `Buffer` on every driver. */
const blobAsBuffer: ValueTransformer = {
  to: (value: Buffer | null | undefined) => value,
  from: (value: Uint8Array | null) => (value === null ? null : Buffer.from(value)),
};

/**
 * Columns all dialects share. Every type is one PostgreSQL and SQLite both accept, with an
 * explicit length where it matters; the body and headers columns differ (see the entities below).
 * `text` is added to the key, owner token and fingerprint columns: MySQL's are `ascii_bin`, as
 * the migration creates them (its default collation compares case-insensitively and ignores
 * trailing spaces), so `synchronize: true` creates the same table. A function, because TypeORM
 * keeps a base class's column over a subclass's of the same property.
 */
function recordColumns(text: Pick<ColumnOptions, 'charset' | 'collation'>) {
  abstract class IdempotencyRecordColumns {
    /** The scoped key id (`buildScopedKey().id`): a hash, never the client's raw key. */
    @PrimaryColumn({
      name: 'key',
      type: 'varchar',
      length: 64,
      primaryKeyConstraintName: IDEMPOTENCY_RECORDS_PRIMARY_KEY,
      ...text,
    })
    key!: string;

    /** `in_progress` or `completed`. */
    @Column({ name: 'state', type: 'varchar', length: 16 })
    state!: IdempotencyRecordState;

    /** Request fingerprint (base64url SHA-256) the record was claimed with. */
    @Column({ name: 'fingerprint', type: 'varchar', length: 64, ...text })
    fingerprint!: string;

    /** Token of the claim that owns the row; every write is guarded by it. */
    @Column({ name: 'owner_token', type: 'varchar', length: 64, ...text })
    ownerToken!: string;

    /** 1 for the first claim, +1 on every takeover and on every claim that replaces an expired row. */
    @Column({ name: 'fencing_token', type: 'integer' })
    fencingToken!: number;

    @Column({ name: 'created_at_ms', type: 'bigint', transformer: epochMs })
    createdAtMs!: number;

    @Column({ name: 'lease_expires_at_ms', type: 'bigint', transformer: epochMs })
    leaseExpiresAtMs!: number;

    /** When the row stops existing for readers; the reaper deletes rows past it. */
    @Column({ name: 'expires_at_ms', type: 'bigint', transformer: epochMs })
    expiresAtMs!: number;

    /** Stored status code; null while `in_progress`. */
    @Column({ name: 'response_status', type: 'integer', nullable: true })
    responseStatus!: number | null;

    /**
     * Stored headers as JSON (`{ "name": "value" | ["v1", "v2"] }`); null while `in_progress`.
     * `text`, but `longtext` on MySQL, whose `text` holds 64 KiB at most.
     */
    abstract responseHeaders: string | null;

    /** True when the response completed without its body (too large or streamed). */
    @Column({ name: 'response_body_omitted', type: 'boolean', default: false })
    responseBodyOmitted!: boolean;

    /** Stored body bytes, exactly as sent; null while `in_progress` or when there was no body. */
    abstract responseBody: Buffer | null;
  }
  return IdempotencyRecordColumns;
}

const IdempotencyRecordColumns = recordColumns({});
const MysqlIdempotencyRecordColumns = recordColumns({ charset: 'ascii', collation: 'ascii_bin' });

/**
 * The durable record on **PostgreSQL** (`response_body` is `bytea`). Register it in the
 * DataSource's `entities` (or use {@link idempotencyTypeOrmEntities}) and create the table with
 * {@link IDEMPOTENCY_TYPEORM_MIGRATIONS}. The store itself reads and writes with SQL of its own
 * and never through a repository: the entity is for your migrations tooling, schema checks and
 * inspection queries.
 *
 * TypeORM validates column types per driver and no binary type is valid on both PostgreSQL and
 * SQLite, so SQLite has its own entity, {@link SqliteIdempotencyRecordEntity}, over the same table.
 *
 * @example
 * const records = dataSource.getRepository(IdempotencyRecordEntity);
 * const stale = await records.find({ where: { state: 'in_progress', leaseExpiresAtMs: LessThan(Date.now()) } });
 * @publicApi
 */
@Entity({ name: IDEMPOTENCY_RECORDS_TABLE })
@Index(IDEMPOTENCY_RECORDS_EXPIRES_INDEX, ['expiresAtMs'])
@Index(IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX, ['state', 'createdAtMs'])
export class IdempotencyRecordEntity extends IdempotencyRecordColumns {
  @Column({ name: 'response_headers', type: 'text', nullable: true })
  responseHeaders!: string | null;

  @Column({ name: 'response_body', type: 'bytea', nullable: true })
  responseBody!: Buffer | null;
}

/**
 * The durable record on **SQLite / sql.js** (`response_body` is `blob`, read back as a `Buffer`).
 * Same table, same columns as {@link IdempotencyRecordEntity}.
 *
 * @publicApi
 */
@Entity({ name: IDEMPOTENCY_RECORDS_TABLE })
@Index(IDEMPOTENCY_RECORDS_EXPIRES_INDEX, ['expiresAtMs'])
@Index(IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX, ['state', 'createdAtMs'])
export class SqliteIdempotencyRecordEntity extends IdempotencyRecordColumns {
  @Column({ name: 'response_headers', type: 'text', nullable: true })
  responseHeaders!: string | null;

  @Column({ name: 'response_body', type: 'blob', nullable: true, transformer: blobAsBuffer })
  responseBody!: Buffer | null;
}

/**
 * The durable record on **MySQL / MariaDB** (`response_body` is `longblob` and `response_headers`
 * `longtext`: a `blob` or `text` holds 64 KiB at most; the key, owner token and fingerprint are
 * `ascii` / `ascii_bin`, as the migration creates them). Same table, same columns as {@link IdempotencyRecordEntity}.
 *
 * @example
 * new DataSource({ type: 'mariadb', entities: [Order, MysqlIdempotencyRecordEntity], migrations: [...IDEMPOTENCY_TYPEORM_MIGRATIONS] })
 * @publicApi
 */
@Entity({ name: IDEMPOTENCY_RECORDS_TABLE })
@Index(IDEMPOTENCY_RECORDS_EXPIRES_INDEX, ['expiresAtMs'])
@Index(IDEMPOTENCY_RECORDS_IN_PROGRESS_INDEX, ['state', 'createdAtMs'])
export class MysqlIdempotencyRecordEntity extends MysqlIdempotencyRecordColumns {
  @Column({ name: 'response_headers', type: 'longtext', nullable: true })
  responseHeaders!: string | null;

  @Column({ name: 'response_body', type: 'longblob', nullable: true })
  responseBody!: Buffer | null;
}

/**
 * The entities to register on a PostgreSQL DataSource.
 *
 * @example
 * new DataSource({ type: 'postgres', entities: [Order, ...IDEMPOTENCY_TYPEORM_ENTITIES], migrations: [...IDEMPOTENCY_TYPEORM_MIGRATIONS] })
 * @publicApi
 */
export const IDEMPOTENCY_TYPEORM_ENTITIES: [typeof IdempotencyRecordEntity] = [IdempotencyRecordEntity];

/**
 * The entities to register for a DataSource of `type`, for applications that run on PostgreSQL,
 * MySQL / MariaDB or embedded sql.js depending on their configuration.
 *
 * @throws IdempotencyConfigurationError for a DataSource type the durable tier does not support.
 * @example
 * entities: [...ORDERS_ENTITIES, ...idempotencyTypeOrmEntities(options.type)]
 * @publicApi
 */
export function idempotencyTypeOrmEntities(
  type: DataSourceOptions['type'],
): [typeof IdempotencyRecordEntity] | [typeof MysqlIdempotencyRecordEntity] | [typeof SqliteIdempotencyRecordEntity] {
  if (type === 'postgres') return [IdempotencyRecordEntity];
  if (isMysqlDataSourceType(type)) return [MysqlIdempotencyRecordEntity];
  if (type === 'sqljs') return [SqliteIdempotencyRecordEntity];
  throw unsupportedDataSourceType(type);
}

/** @internal */
export function unsupportedDataSourceType(type: DataSourceOptions['type']): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `the durable idempotency tier supports DataSource types 'postgres', 'mysql', 'mariadb' and 'sqljs', not '${type}'.`,
  );
}
