import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { IdempotencyRecordUnreadableError } from '../errors/idempotency-record-unreadable.error.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';

/**
 * One key of the encryption key ring.
 *
 * @publicApi
 */
export interface IdempotencyEncryptionKey {
  /**
   * Stable name of the key, stored in clear in every envelope it seals (so keep it free of
   * secrets): 1 to 64 characters of `A-Z a-z 0-9 . _ -`, e.g. `'2026-11'`.
   */
  id: string;
  /** 32 random bytes (AES-256), e.g. `Buffer.from(process.env.IDEMPOTENCY_KEY_2026_11!, 'base64')`. */
  key: Buffer;
}

/**
 * Encryption at rest of stored responses (module option `encryption`).
 *
 * @publicApi
 */
export interface IdempotencyEncryptionOptions {
  /** The key ring: every key that may have sealed a record still alive (within its TTL). */
  keys: IdempotencyEncryptionKey[];
  /** The key that seals new records. Rotation: add a key, make it active, drop the old one after a TTL. */
  activeKeyId: string;
  /**
   * Replay records stored in clear (written before encryption was turned on) instead of failing
   * closed on them. Meant for the rollout, for one TTL. @default false
   */
  acceptUnencrypted?: boolean;
}

/** Marks a sealed body: a NUL byte (no JSON or text body starts with one), a name and a version. */
const MAGIC = Buffer.from('\0idem-aes256gcm\x01', 'latin1');
const IV_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;
const ALGORITHM = 'aes-256-gcm';

/** True when `body` is a sealed envelope (whether or not this process can open it). */
export function isSealedBody(body: Buffer | undefined): boolean {
  return body !== undefined && body.length >= MAGIC.length && body.subarray(0, MAGIC.length).equals(MAGIC);
}

/**
 * Seals stored responses with AES-256-GCM and opens them again (DESIGN "Failure policy").
 *
 * - What is sealed: the headers, the body and the `bodyOmitted` flag, in one envelope stored as
 *   the record's body; the stored record keeps only the status code in clear (it is
 *   authenticated). `run()` values are stored responses too, so they are sealed alike.
 * - Envelope: magic, key id, a random 96-bit IV, the 128-bit tag, the ciphertext.
 * - Additional data binds the ciphertext to its record id and status: an envelope copied to
 *   another record, or a status changed in storage, does not verify.
 * - Rotation: `seal` uses the active key; `open` picks the key the envelope names.
 * - Fails closed: anything that does not open throws {@link IdempotencyRecordUnreadableError}.
 *
 * @example
 * const cipher = new IdempotencyCipher({ keys: [{ id: 'k1', key: randomBytes(32) }], activeKeyId: 'k1' });
 * const sealed = cipher.seal(scoped.id, response);
 * cipher.open(scoped.id, sealed); // equal to response
 */
export class IdempotencyCipher {
  private readonly keys = new Map<string, Buffer>();
  private readonly activeKeyId: string;
  private readonly acceptUnencrypted: boolean;

  /** @throws IdempotencyConfigurationError when the ring is empty, a key is not 32 bytes, an id repeats or the active key is missing. */
  constructor(options: IdempotencyEncryptionOptions) {
    const fail = (message: string): never => {
      throw new IdempotencyConfigurationError(`encryption: ${message}`);
    };
    if (!options || !Array.isArray(options.keys) || options.keys.length === 0)
      fail('`keys` must list at least one key.');
    for (const { id, key } of options.keys) {
      if (typeof id !== 'string' || !KEY_ID.test(id))
        fail(`key id ${JSON.stringify(id)} must be 1 to 64 characters of A-Z a-z 0-9 . _ -.`);
      if (!Buffer.isBuffer(key) || key.length !== KEY_BYTES)
        fail(`key "${id}" must be a Buffer of ${KEY_BYTES} bytes (AES-256).`);
      if (this.keys.has(id)) fail(`key id "${id}" appears twice.`);
      this.keys.set(id, Buffer.from(key));
    }
    if (!this.keys.has(options.activeKeyId)) fail(`activeKeyId "${options.activeKeyId}" is not in \`keys\`.`);
    this.activeKeyId = options.activeKeyId;
    this.acceptUnencrypted = options.acceptUnencrypted === true;
  }

  /** Encrypts `response` for the record `recordId` with the active key. */
  seal(recordId: string, response: StoredResponse): StoredResponse {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv(ALGORITHM, this.keys.get(this.activeKeyId)!, iv);
    cipher.setAAD(additionalData(recordId, response.statusCode));
    const ciphertext = Buffer.concat([cipher.update(encodePlaintext(response)), cipher.final()]);
    const keyId = Buffer.from(this.activeKeyId, 'latin1');
    const envelope = Buffer.concat([MAGIC, Buffer.from([keyId.length]), keyId, iv, cipher.getAuthTag(), ciphertext]);
    return { statusCode: response.statusCode, headers: {}, body: envelope };
  }

  /** Decrypts what {@link seal} stored for `recordId`. @throws IdempotencyRecordUnreadableError */
  open(recordId: string, stored: StoredResponse): StoredResponse {
    if (!isSealedBody(stored.body)) {
      if (this.acceptUnencrypted) return stored;
      throw new IdempotencyRecordUnreadableError(
        'the stored response is not encrypted, and encryption is required',
        'not-encrypted',
      );
    }
    const { keyId, iv, tag, ciphertext } = parseEnvelope(stored.body!);
    const key = this.keys.get(keyId);
    if (!key)
      throw new IdempotencyRecordUnreadableError(
        `the stored response is encrypted with key "${keyId}", which is not in the key ring`,
        'unknown-key',
      );
    let plaintext: Buffer;
    try {
      const decipher = createDecipheriv(ALGORITHM, key, iv);
      decipher.setAAD(additionalData(recordId, stored.statusCode));
      decipher.setAuthTag(tag);
      plaintext = Buffer.concat([decipher.update(ciphertext), decipher.final()]);
    } catch {
      throw new IdempotencyRecordUnreadableError(
        'the stored response does not verify: it was altered or belongs to another record',
        'not-authentic',
      );
    }
    return decodePlaintext(stored.statusCode, plaintext);
  }

  /** The id of the key that sealed `stored`, or undefined when it is not sealed (for audits and tests). */
  static keyIdOf(stored: StoredResponse): string | undefined {
    return isSealedBody(stored.body) ? parseEnvelope(stored.body!).keyId : undefined;
  }
}

function additionalData(recordId: string, statusCode: number): Buffer {
  return Buffer.from(JSON.stringify(['idempotency-response-v1', recordId, statusCode]), 'utf8');
}

function parseEnvelope(envelope: Buffer): { keyId: string; iv: Buffer; tag: Buffer; ciphertext: Buffer } {
  let at = MAGIC.length;
  const keyIdLength = envelope[at++];
  const minimum = at + (keyIdLength ?? 0) + IV_BYTES + TAG_BYTES;
  if (keyIdLength === undefined || keyIdLength === 0 || envelope.length < minimum) {
    throw new IdempotencyRecordUnreadableError('the stored response is a truncated envelope', 'malformed');
  }
  const keyId = envelope.subarray(at, (at += keyIdLength)).toString('latin1');
  const iv = envelope.subarray(at, (at += IV_BYTES));
  const tag = envelope.subarray(at, (at += TAG_BYTES));
  return { keyId, iv, tag, ciphertext: envelope.subarray(at) };
}

/** `[u32 headers length][headers JSON][flags][body]`: no base64, so a sealed body grows by a constant. */
function encodePlaintext(response: StoredResponse): Buffer {
  const headers = Buffer.from(JSON.stringify(response.headers), 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(headers.length);
  const flags = Buffer.from([(response.bodyOmitted ? 1 : 0) | (response.body !== undefined ? 2 : 0)]);
  return Buffer.concat([length, headers, flags, response.body ?? Buffer.alloc(0)]);
}

function decodePlaintext(statusCode: number, plaintext: Buffer): StoredResponse {
  const headersLength = plaintext.readUInt32BE(0);
  const headers = JSON.parse(plaintext.subarray(4, 4 + headersLength).toString('utf8')) as StoredResponse['headers'];
  const flags = plaintext[4 + headersLength];
  const body = plaintext.subarray(5 + headersLength);
  return {
    statusCode,
    headers,
    ...((flags & 2) !== 0 && { body: Buffer.from(body) }),
    ...((flags & 1) !== 0 && { bodyOmitted: true }),
  };
}
