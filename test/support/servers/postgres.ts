import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { sleep } from '../timing.js';

/**
 * PostgreSQL for the e2e suites: database `test` on 127.0.0.1:5432 (override with
 * `TEST_DATABASE_URL`). Each suite works in a throwaway schema of its own and drops it after.
 */
export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

function where(url: string): string {
  const { hostname, port, pathname } = new URL(url);
  return `${hostname}:${port || 5432}${pathname}`;
}

/**
 * A connected client, or an error that names the server and how to start it. The caller ends it.
 */
export async function connectPostgresOrFail(url: string = TEST_DATABASE_URL): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return client;
  } catch (error) {
    await client.end().catch(() => undefined);
    throw new Error(
      `PostgreSQL not reachable at ${where(url)}: start it (see README, "Running the tests": ` +
        '`docker compose up -d postgres`, or `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` ' +
        `and \`createdb test\`). Cause: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** A fresh schema name (`<prefix>_<random>`) that does not exist yet; nothing is created. */
export function throwawaySchemaName(prefix = 'e2e'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/** Creates a throwaway schema in database `test` and returns its name. */
export async function createThrowawaySchema(prefix = 'e2e', url: string = TEST_DATABASE_URL): Promise<string> {
  const schema = throwawaySchemaName(prefix);
  const client = await connectPostgresOrFail(url);
  try {
    await client.query(`CREATE SCHEMA "${schema}"`);
  } finally {
    await client.end();
  }
  return schema;
}

/** Drops a schema and everything in it (no error when it is already gone). */
export async function dropSchema(schema: string, url: string = TEST_DATABASE_URL): Promise<void> {
  const client = await connectPostgresOrFail(url);
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** Runs one query in database `test` and returns its rows. */
export async function queryTestDatabase<T extends object = Record<string, unknown>>(
  sql: string,
  params: unknown[] = [],
  url: string = TEST_DATABASE_URL,
): Promise<T[]> {
  const client = await connectPostgresOrFail(url);
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end();
  }
}

/** Creates an empty throwaway database next to `test` and returns its URL and name. */
export async function createThrowawayDatabase(
  prefix = 'e2e',
  url: string = TEST_DATABASE_URL,
): Promise<{ name: string; url: string }> {
  const name = throwawaySchemaName(prefix);
  const client = await connectPostgresOrFail(url);
  try {
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  const databaseUrl = new URL(url);
  databaseUrl.pathname = `/${name}`;
  return { name, url: databaseUrl.toString() };
}

/** Drops a throwaway database, closing the connections still open to it. */
export async function dropDatabase(name: string, url: string = TEST_DATABASE_URL): Promise<void> {
  const client = await connectPostgresOrFail(url);
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

/**
 * Waits until `schema.table` has a statement of another session waiting on a lock (what a test
 * holds to stop a process mid-transaction), polling `client` every 50 ms for up to `timeoutMs`;
 * returns how many such statements there are (0 when none showed up in time). The table is
 * matched schema-qualified, as TypeORM writes it: other suites on the shared database lock
 * tables of the same name in schemas of their own.
 */
export async function waitForLockWaiters(
  client: pg.Client,
  schema: string,
  table: string,
  timeoutMs = 10_000,
): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let waiting = 0;
  while (waiting === 0 && Date.now() < deadline) {
    await sleep(50);
    // Inside a transaction (the lock holder's own) the statistics views keep their first
    // snapshot: drop it, or a waiter that arrives later is never seen.
    await client.query('SELECT pg_stat_clear_snapshot()');
    const rows = await client.query(
      "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE $1 AND pid <> pg_backend_pid()",
      [`%"${schema}"."${table}"%`],
    );
    waiting = Number(rows.rows[0].n);
  }
  return waiting;
}
