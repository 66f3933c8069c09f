import type { ValueTransformer } from 'typeorm';

/**
 * `bigint` columns come back from PostgreSQL as strings (they may exceed 2^53) and from sql.js
 * as numbers. Every bigint of this service (cents, epoch milliseconds) stays below 2^53, so it
 * is read back as a JS number on both.
 */
export const bigintAsNumber: ValueTransformer = {
  to: (value: number | null | undefined) => value,
  from: (value: string | number | null) => (value === null ? null : Number(value)),
};
