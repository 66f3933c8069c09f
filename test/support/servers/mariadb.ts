import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';

/**
 * MariaDB (or MySQL) for the e2e suites: root with an empty password on 127.0.0.1:3306 (override
 * with `TEST_MARIADB_URL`). MySQL has no schemas inside a database: each suite works in a
 * throwaway database of its own and drops it after.
 */
export const TEST_MARIADB_URL = process.env.TEST_MARIADB_URL ?? 'mysql://root@127.0.0.1:3306/test';

/** `TEST_MARIADB_URL` with another database. */
export function mariadbUrl(database: string, url: string = TEST_MARIADB_URL): string {
  const target = new URL(url);
  target.pathname = `/${database}`;
  return target.toString();
}

/** A connected client, or an error that names the server and how to start it. The caller ends it. */
export async function connectMariadbOrFail(url: string = TEST_MARIADB_URL): Promise<mysql.Connection> {
  try {
    const connection = await mysql.createConnection({ uri: url, connectTimeout: 3000 });
    await connection.query('SELECT 1');
    return connection;
  } catch (error) {
    const { hostname, port } = new URL(url);
    throw new Error(
      `MariaDB not reachable at ${hostname}:${port || 3306}: start it (see README, "Running the tests": ` +
        '`docker compose up -d mariadb`, or `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`). ' +
        `Cause: ${(error as Error).message}`,
      { cause: error },
    );
  }
}

/** Creates an empty throwaway database (`<prefix>_<random>`) and returns its name. */
export async function createMariadbDatabase(prefix = 'e2e'): Promise<string> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  const connection = await connectMariadbOrFail();
  try {
    await connection.query(`CREATE DATABASE \`${name}\``);
  } finally {
    await connection.end();
  }
  return name;
}

/** Drops a throwaway database and everything in it (no error when it is already gone). */
export async function dropMariadbDatabase(name: string): Promise<void> {
  const connection = await connectMariadbOrFail();
  try {
    await connection.query(`DROP DATABASE IF EXISTS \`${name}\``);
  } finally {
    await connection.end();
  }
}

/** Runs one query (`?` placeholders) and returns its rows. */
export async function queryMariadb<T extends object = Record<string, unknown>>(
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  const connection = await connectMariadbOrFail();
  try {
    const [rows] = await connection.query(sql, params);
    return rows as T[];
  } finally {
    await connection.end();
  }
}
