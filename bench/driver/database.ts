import { DataSource } from 'typeorm';
import { mariadbUrl, queryMariadb } from '../../test/support/servers/mariadb.js';
import { IDEMPOTENCY_TYPEORM_MIGRATIONS } from 'nestjs-idempotency/typeorm';
import { BENCH_ORDERS_TABLE } from '../app/bench-orders.service.js';

/** Creates the handler's table and the durable idempotency table in the bench schema. */
export async function prepareBenchSchema(databaseUrl: string, schema: string): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url: databaseUrl,
    schema,
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
  });
  await dataSource.initialize();
  try {
    await dataSource.query(
      `CREATE TABLE "${schema}".${BENCH_ORDERS_TABLE} (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, customer_id uuid NOT NULL, ` +
        'currency char(3) NOT NULL, items jsonb NOT NULL, total_cents bigint NOT NULL, created_at timestamptz NOT NULL)',
    );
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

/** Empties the handler's table between rounds, so every round inserts into a table of the same size. */
export async function truncateOrders(databaseUrl: string, schema: string): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url: databaseUrl, schema });
  await dataSource.initialize();
  try {
    await dataSource.query(`TRUNCATE "${schema}".${BENCH_ORDERS_TABLE}`);
  } finally {
    await dataSource.destroy();
  }
}

/** MariaDB (`fresh-durable-mariadb`): the handler's table and the durable table in the bench database. */
export async function prepareBenchMariadb(database: string): Promise<void> {
  const dataSource = new DataSource({
    type: 'mariadb',
    url: mariadbUrl(database),
    migrations: IDEMPOTENCY_TYPEORM_MIGRATIONS,
  });
  await dataSource.initialize();
  try {
    await dataSource.query(
      `CREATE TABLE ${BENCH_ORDERS_TABLE} (id char(36) PRIMARY KEY, tenant_id char(36) NOT NULL, customer_id char(36) NOT NULL, ` +
        'currency char(3) NOT NULL, items json NOT NULL, total_cents bigint NOT NULL, created_at varchar(32) NOT NULL)',
    );
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

/** Empties the MariaDB handler's table between rounds. */
export async function truncateBenchMariadb(database: string): Promise<void> {
  await queryMariadb(`TRUNCATE TABLE \`${database}\`.${BENCH_ORDERS_TABLE}`);
}
