/** What the memory store counts against its caps (`maxEntries`, `maxBytes`). */
import type { IdempotencyRecord } from '../interfaces/idempotency-record.interface.js';

/** What a record costs besides its response: the object, its fields, the map entry. */
const RECORD_OVERHEAD_BYTES = 256;

export function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

/** An estimate of the memory a record holds: its response bytes and headers, plus a fixed overhead. */
export function recordBytes(key: string, record: IdempotencyRecord): number {
  let bytes = RECORD_OVERHEAD_BYTES + key.length + record.fingerprint.length + record.ownerToken.length;
  const response = record.response;
  if (response) {
    bytes += response.body?.length ?? 0;
    for (const [name, value] of Object.entries(response.headers)) {
      bytes += name.length + (Array.isArray(value) ? value.join('').length : value.length);
    }
  }
  return bytes;
}
