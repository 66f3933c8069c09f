import type { IdempotencyEncryptionOptions } from 'nestjs-idempotency';

const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * Reads `IDEMPOTENCY_ENCRYPTION_KEYS`: comma-separated `id:base64` entries, each a 32-byte
 * AES-256 key; the first one seals new records, the others still open older ones (rotation).
 * Problems are appended to `problems` and never quote key material.
 */
export function parseEncryptionKeys(
  raw: string | undefined,
  problems: string[],
): IdempotencyEncryptionOptions | undefined {
  if (raw === undefined) return undefined;
  const keys: IdempotencyEncryptionOptions['keys'] = [];
  for (const [index, entry] of raw.split(',').entries()) {
    const [id = '', material = '', ...rest] = entry.trim().split(':');
    const key = Buffer.from(material, 'base64');
    if (!KEY_ID.test(id) || rest.length > 0) {
      problems.push(
        `IDEMPOTENCY_ENCRYPTION_KEYS entry ${index + 1} must be <id>:<base64 key> with an id of 1 to 64 letters, digits or . _ -`,
      );
    } else if (!BASE64.test(material) || key.length !== 32) {
      problems.push(
        `IDEMPOTENCY_ENCRYPTION_KEYS key "${id}" must be 32 bytes in base64 (e.g. openssl rand -base64 32)`,
      );
    } else if (keys.some((known) => known.id === id)) {
      problems.push(`IDEMPOTENCY_ENCRYPTION_KEYS lists the key id "${id}" twice`);
    } else {
      keys.push({ id, key });
    }
  }
  return keys.length > 0 ? { keys, activeKeyId: keys[0].id } : undefined;
}
