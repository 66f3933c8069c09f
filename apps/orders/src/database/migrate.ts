import { createHash } from 'node:crypto';
import { Logger } from '@nestjs/common';
import type { DataSource } from 'typeorm';

const logger = new Logger('Migrations');

/**
 * A 64-bit advisory lock key for "the migrations of this schema", so instances that share a
 * database but not a schema (the e2e suites) don't wait for each other.
 */
export function migrationLockKey(schema: string): string {
  return createHash('sha256').update(`orders:migrations:${schema}`).digest().readBigInt64BE(0).toString();
}

/**
 * Brings the schema up to date. Several instances may start at once against one empty
 * PostgreSQL database: each takes a session-level advisory lock on a dedicated connection, so
 * one creates the schema and runs the migrations while the others wait, then find nothing left
 * to do. MySQL / MariaDB: the same with a named lock (`GET_LOCK`) of the database. On sql.js the
 * database belongs to one process, so no lock is needed.
 */
export async function migrateDatabase(dataSource: DataSource): Promise<void> {
  if (dataSource.options.type === 'mysql' || dataSource.options.type === 'mariadb') {
    await migrateUnderNamedLock(dataSource);
    return;
  }
  if (dataSource.options.type !== 'postgres') {
    await runPending(dataSource);
    return;
  }
  const schema = dataSource.options.schema ?? 'public';
  const lockRunner = dataSource.createQueryRunner();
  const key = migrationLockKey(schema);
  try {
    await lockRunner.connect();
    await lockRunner.query('SELECT pg_advisory_lock($1::bigint)', [key]);
    try {
      await lockRunner.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
      await runPending(dataSource);
    } finally {
      await lockRunner.query('SELECT pg_advisory_unlock($1::bigint)', [key]);
    }
  } finally {
    await lockRunner.release();
  }
}

async function runPending(dataSource: DataSource): Promise<void> {
  const applied = await dataSource.runMigrations({ transaction: 'each' });
  if (applied.length > 0) {
    logger.log(`Applied ${applied.length} migration(s): ${applied.map((m) => m.name).join(', ')}`);
  }
}

/** How long an instance waits for another one's migrations on MySQL, in seconds. */
const MYSQL_MIGRATION_LOCK_WAIT_S = 120;

/** MySQL / MariaDB: the migrations under `GET_LOCK` on a dedicated connection (a session-level lock, like PostgreSQL's advisory lock). */
async function migrateUnderNamedLock(dataSource: DataSource): Promise<void> {
  const lockRunner = dataSource.createQueryRunner();
  try {
    await lockRunner.connect();
    const [{ name }] = (await lockRunner.query('SELECT DATABASE() AS name')) as { name: string }[];
    // GET_LOCK names are at most 64 characters: the key's hash stands for the database.
    const lock = `orders:migrations:${migrationLockKey(name)}`;
    const [{ granted }] = (await lockRunner.query('SELECT GET_LOCK(?, ?) AS granted', [
      lock,
      MYSQL_MIGRATION_LOCK_WAIT_S,
    ])) as { granted: number | string | null }[];
    if (Number(granted) !== 1) {
      throw new Error(
        `another instance held the migration lock of database ${name} for ${MYSQL_MIGRATION_LOCK_WAIT_S} s`,
      );
    }
    try {
      await runPending(dataSource);
    } finally {
      await lockRunner.query('SELECT RELEASE_LOCK(?)', [lock]);
    }
  } finally {
    await lockRunner.release();
  }
}
