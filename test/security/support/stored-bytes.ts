import type { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import type { IdempotencyRecord } from 'nestjs-idempotency';

/** One stored thing as raw bytes, with the name it is stored under. */
export interface StoredBytes {
  name: string;
  bytes: Buffer;
}

/** Every Redis key under `prefix` with its raw value (SCAN, never KEYS). */
export async function redisStoredBytes(client: Redis, prefix: string): Promise<StoredBytes[]> {
  const found: StoredBytes[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    for (const key of keys) found.push({ name: key, bytes: (await client.getBuffer(key)) ?? Buffer.alloc(0) });
    cursor = next;
  } while (cursor !== '0');
  return found;
}

/** Every row of the durable table, each column as its stored bytes (bytea as is, the rest as text). */
export async function postgresStoredBytes(dataSource: DataSource): Promise<StoredBytes[]> {
  return rowsAsStoredBytes(await dataSource.query('SELECT * FROM idempotency_records'));
}

/** Rows of the durable table (`SELECT *`) as stored bytes, named by their key. */
export function rowsAsStoredBytes(rows: Array<Record<string, unknown>>): StoredBytes[] {
  return rows.map((row) => ({
    name: String(row.key),
    bytes: Buffer.concat(
      Object.values(row).map((value) =>
        Buffer.isBuffer(value) ? value : Buffer.from(value === null ? '' : String(value), 'utf8'),
      ),
    ),
  }));
}

/** A fast-tier record as the bytes of everything it holds (for the memory store, read through `get`). */
export function recordBytes(name: string, record: IdempotencyRecord): StoredBytes {
  const { response, ...fields } = record;
  return {
    name,
    bytes: Buffer.concat([
      Buffer.from(JSON.stringify({ ...fields, status: response?.statusCode, headers: response?.headers }), 'utf8'),
      response?.body ?? Buffer.alloc(0),
    ]),
  };
}

/** The names and values among `stored` that contain `needle` (as UTF-8), for a readable failure. */
export function holding(stored: StoredBytes[], needle: string): string[] {
  return stored
    .filter(({ name, bytes }) => name.includes(needle) || bytes.includes(Buffer.from(needle, 'utf8')))
    .map(({ name }) => name);
}
