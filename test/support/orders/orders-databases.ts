import type pg from 'pg';
import type mysql from 'mysql2/promise';
import {
  connectMariadbOrFail,
  createMariadbDatabase,
  dropMariadbDatabase,
  mariadbUrl,
  queryMariadb,
  TEST_MARIADB_URL,
} from '../servers/mariadb.js';
import {
  connectPostgresOrFail,
  dropSchema,
  queryTestDatabase,
  TEST_DATABASE_URL,
  throwawaySchemaName,
  waitForLockWaiters,
} from '../servers/postgres.js';
import { sleep } from '../timing.js';

/**
 * The SQL databases the orders service's durable, crash and race suites run on: PostgreSQL (a
 * throwaway schema) and MariaDB (a throwaway database), each with what those suites do to it
 * from outside the service.
 */

/** A table the suites count or lock. */
export type OrdersTable = 'orders' | 'payments' | 'idempotency_records' | 'order_notifications';

/** A lock a test holds on a table, so that the service's next write to it waits. */
export interface TableLock {
  /** How many statements of other sessions wait on the table (0 when none did within `timeoutMs`). */
  waiters(timeoutMs: number): Promise<number>;
  release(): Promise<void>;
}

export interface OrdersDatabase {
  /** The server's port on 127.0.0.1 (where a test puts its proxy in front). */
  readonly port: number;
  /** The service's environment for this database, through `viaPort` when given. */
  env(viaPort?: number): Record<string, string>;
  /** Rows of `table`, only the tenant's when given (never for idempotency_records, which has no tenant). */
  count(table: OrdersTable, tenantId?: string): Promise<number>;
  /** The ids of the tenant's orders. */
  orderIdsOf(tenantId: string): Promise<string[]>;
  renameTable(from: string, to: string): Promise<void>;
  /** Locks `table` against writes of every other session until released. */
  lockTable(table: OrdersTable): Promise<TableLock>;
  drop(): Promise<void>;
  /** Whether the service created its idempotency records as the partitioned table (PostgreSQL's `IDEMPOTENCY_PARTITION_MS`). */
  partitionedIdempotencyTable(): Promise<boolean>;
}

const tenantFilter = (table: OrdersTable, tenantId: string | undefined) =>
  tenantId !== undefined && table !== 'idempotency_records';

/** `tableEnv`: the service's environment for its idempotency table (`IDEMPOTENCY_PARTITION_MS`). */
async function postgres(prefix: string, tableEnv: Record<string, string> = {}): Promise<OrdersDatabase> {
  await (await connectPostgresOrFail()).end();
  const schema = throwawaySchemaName(prefix);
  const target = new URL(TEST_DATABASE_URL);
  return {
    port: Number(target.port || 5432),
    env(viaPort) {
      const url = new URL(TEST_DATABASE_URL);
      if (viaPort !== undefined) url.port = String(viaPort);
      return { DATABASE_URL: url.toString(), DATABASE_SCHEMA: schema, ...tableEnv };
    },
    async count(table, tenantId) {
      const filtered = tenantFilter(table, tenantId);
      const rows = await queryTestDatabase<{ n: string }>(
        `SELECT count(*) AS n FROM "${schema}".${table}${filtered ? ' WHERE tenant_id = $1' : ''}`,
        filtered ? [tenantId] : [],
      );
      return Number(rows[0].n);
    },
    async orderIdsOf(tenantId) {
      const rows = await queryTestDatabase<{ id: string }>(`SELECT id FROM "${schema}".orders WHERE tenant_id = $1`, [
        tenantId,
      ]);
      return rows.map((row) => row.id);
    },
    async renameTable(from, to) {
      await queryTestDatabase(`ALTER TABLE "${schema}".${from} RENAME TO ${to}`);
    },
    async lockTable(table) {
      const client: pg.Client = await connectPostgresOrFail();
      await client.query('BEGIN');
      await client.query(`LOCK TABLE "${schema}".${table} IN EXCLUSIVE MODE`);
      return {
        waiters: (timeoutMs) => waitForLockWaiters(client, schema, table, timeoutMs),
        async release() {
          await client.query('ROLLBACK');
          await client.end();
        },
      };
    },
    drop: () => dropSchema(schema),
    async partitionedIdempotencyTable() {
      const rows = await queryTestDatabase<{ relkind: string }>(
        `SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relname = 'idempotency_records'`,
        [schema],
      );
      return rows[0]?.relkind === 'p';
    },
  };
}

async function mariadb(prefix: string): Promise<OrdersDatabase> {
  const database = await createMariadbDatabase(prefix);
  const qualified = (table: string) => `\`${database}\`.${table}`;
  return {
    port: Number(new URL(TEST_MARIADB_URL).port || 3306),
    env(viaPort) {
      const url = new URL(mariadbUrl(database));
      if (viaPort !== undefined) url.port = String(viaPort);
      return { DATABASE_URL: url.toString() };
    },
    async count(table, tenantId) {
      const filtered = tenantFilter(table, tenantId);
      const rows = await queryMariadb<{ n: number | string }>(
        `SELECT count(*) AS n FROM ${qualified(table)}${filtered ? ' WHERE tenant_id = ?' : ''}`,
        filtered ? [tenantId] : [],
      );
      return Number(rows[0].n);
    },
    async orderIdsOf(tenantId) {
      const rows = await queryMariadb<{ id: string }>(`SELECT id FROM ${qualified('orders')} WHERE tenant_id = ?`, [
        tenantId,
      ]);
      return rows.map((row) => row.id);
    },
    async renameTable(from, to) {
      await queryMariadb(`RENAME TABLE ${qualified(from)} TO ${qualified(to)}`);
    },
    async lockTable(table) {
      const connection: mysql.Connection = await connectMariadbOrFail();
      await connection.query(`LOCK TABLES ${qualified(table)} WRITE`);
      return {
        async waiters(timeoutMs) {
          const deadline = Date.now() + timeoutMs;
          let waiting = 0;
          while (waiting === 0 && Date.now() < deadline) {
            await sleep(50);
            const [rows] = await connection.query(
              `SELECT count(*) AS n FROM information_schema.processlist
                WHERE db = ? AND state LIKE 'Waiting for table%' AND info LIKE ? AND id <> CONNECTION_ID()`,
              [database, `%${table}%`],
            );
            waiting = Number((rows as { n: number | string }[])[0].n);
          }
          return waiting;
        },
        async release() {
          await connection.query('UNLOCK TABLES');
          await connection.end();
        },
      };
    },
    drop: () => dropMariadbDatabase(database),
    // The library partitions the table on PostgreSQL only.
    partitionedIdempotencyTable: async () => false,
  };
}

/** The databases, each opened for one suite with a name `prefix` of its own (a schema, or a database). */
export const ordersDatabases: [string, (prefix: string) => Promise<OrdersDatabase>][] = [
  ['PostgreSQL', postgres],
  // The partitioned idempotency table, with the narrowest partitions so that claims cross their edges.
  ['PostgreSQL (partitioned idempotency table)', (prefix) => postgres(prefix, { IDEMPOTENCY_PARTITION_MS: '1000' })],
  ['MariaDB', mariadb],
];
