import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_TYPEORM_ENTITIES,
  IDEMPOTENCY_TYPEORM_MIGRATIONS,
  idempotencyTypeOrmEntities,
} from 'nestjs-idempotency/typeorm';
import { mariadbUrl } from './mariadb.js';
import { TEST_DATABASE_URL } from './postgres.js';

/** An initialized PostgreSQL DataSource on `schema` of database `test`, with the idempotency table migrated in. */
export async function openIdempotencyDataSource(schema: string): Promise<DataSource> {
  const dataSource = await new DataSource({
    type: 'postgres',
    url: TEST_DATABASE_URL,
    schema,
    extra: { options: `-c search_path=${schema}` },
    entities: IDEMPOTENCY_TYPEORM_ENTITIES,
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
  }).initialize();
  await dataSource.runMigrations();
  return dataSource;
}

/** An initialized MariaDB DataSource on `database` (with its `poolSize` when given), with the idempotency table migrated in. */
export async function openMariadbIdempotencyDataSource(
  database: string,
  overrides: { poolSize?: number } = {},
): Promise<DataSource> {
  const dataSource = await new DataSource({
    type: 'mariadb',
    url: mariadbUrl(database),
    entities: idempotencyTypeOrmEntities('mariadb'),
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
    ...overrides,
  }).initialize();
  await dataSource.runMigrations();
  return dataSource;
}
