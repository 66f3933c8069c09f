import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';
import { IdempotencyRecordUnreadableError } from '../errors/idempotency-record-unreadable.error.js';
import type { StoredResponse } from '../interfaces/idempotency-record.interface.js';
import { IdempotencyCipher, isSealedBody } from './idempotency-cipher.js';

const k1 = { id: 'k1', key: randomBytes(32) };
const k2 = { id: 'k2', key: randomBytes(32) };
const RECORD = '0123456789abcdef0123456789abcdef';
const response: StoredResponse = {
  statusCode: 201,
  headers: { 'content-type': 'application/json', location: '/orders/secret-order', vary: ['a', 'b'] },
  body: Buffer.from('{"card":"4242-secret-pan"}'),
};

function reasonOf(action: () => unknown): string | undefined {
  try {
    action();
  } catch (error) {
    if (error instanceof IdempotencyRecordUnreadableError) return error.reason;
    throw error;
  }
  return undefined;
}

describe('IdempotencyCipher', () => {
  const cipher = new IdempotencyCipher({ keys: [k1], activeKeyId: 'k1' });

  it('opens what it sealed: status, headers and body come back equal', () => {
    expect(cipher.open(RECORD, cipher.seal(RECORD, response))).toEqual(response);
  });

  it('keeps nothing of the headers or the body in clear, only the status', () => {
    const sealed = cipher.seal(RECORD, response);
    expect(sealed.statusCode).toBe(201);
    expect(sealed.headers).toEqual({});
    expect(isSealedBody(sealed.body)).toBe(true);
    expect(sealed.body!.includes('secret')).toBe(false);
    expect(sealed.body!.includes('application/json')).toBe(false);
  });

  it('uses a fresh IV per seal: the same response never gives the same bytes', () => {
    expect(cipher.seal(RECORD, response).body!.equals(cipher.seal(RECORD, response).body!)).toBe(false);
  });

  it('keeps bodyOmitted and a missing body', () => {
    const omitted: StoredResponse = { statusCode: 201, headers: { location: '/x' }, bodyOmitted: true };
    expect(cipher.open(RECORD, cipher.seal(RECORD, omitted))).toEqual(omitted);
  });

  it('binds the envelope to its record: moved to another record id, it does not open', () => {
    const sealed = cipher.seal(RECORD, response);
    expect(reasonOf(() => cipher.open('ffffffffffffffffffffffffffffffff', sealed))).toBe('not-authentic');
  });

  it('binds the status: a status changed in storage does not open', () => {
    const sealed = cipher.seal(RECORD, response);
    expect(reasonOf(() => cipher.open(RECORD, { ...sealed, statusCode: 200 }))).toBe('not-authentic');
  });

  it('fails closed on any flipped byte of the IV, tag or ciphertext', () => {
    const sealed = cipher.seal(RECORD, response);
    const headerLength = 16 + 1 + 2; // magic, key id length, "k1"
    for (let at = headerLength; at < sealed.body!.length; at++) {
      const body = Buffer.from(sealed.body!);
      body[at] ^= 0x01;
      expect(reasonOf(() => cipher.open(RECORD, { ...sealed, body }))).toBe('not-authentic');
    }
  });

  it('fails closed on a truncated envelope', () => {
    const sealed = cipher.seal(RECORD, response);
    expect(reasonOf(() => cipher.open(RECORD, { ...sealed, body: sealed.body!.subarray(0, 30) }))).toBe('malformed');
  });

  it('rotation: new records use the active key, older ones still open with theirs', () => {
    const before = cipher.seal(RECORD, response);
    const rotated = new IdempotencyCipher({ keys: [k1, k2], activeKeyId: 'k2' });
    const after = rotated.seal(RECORD, response);
    expect(IdempotencyCipher.keyIdOf(before)).toBe('k1');
    expect(IdempotencyCipher.keyIdOf(after)).toBe('k2');
    expect(rotated.open(RECORD, before)).toEqual(response);
    expect(rotated.open(RECORD, after)).toEqual(response);
  });

  it('fails closed on a key that left the ring', () => {
    const retired = new IdempotencyCipher({ keys: [k2], activeKeyId: 'k2' });
    expect(reasonOf(() => retired.open(RECORD, cipher.seal(RECORD, response)))).toBe('unknown-key');
  });

  it('fails closed on a key id reused for another key', () => {
    const impostor = new IdempotencyCipher({ keys: [{ id: 'k1', key: randomBytes(32) }], activeKeyId: 'k1' });
    expect(reasonOf(() => impostor.open(RECORD, cipher.seal(RECORD, response)))).toBe('not-authentic');
  });

  it('refuses a record stored in clear, unless acceptUnencrypted is set for the rollout', () => {
    expect(reasonOf(() => cipher.open(RECORD, response))).toBe('not-encrypted');
    const rollout = new IdempotencyCipher({ keys: [k1], activeKeyId: 'k1', acceptUnencrypted: true });
    expect(rollout.open(RECORD, response)).toBe(response);
  });

  it.each([
    ['an empty ring', { keys: [], activeKeyId: 'k1' }],
    ['a 16-byte key', { keys: [{ id: 'k1', key: randomBytes(16) }], activeKeyId: 'k1' }],
    ['a key that is a string', { keys: [{ id: 'k1', key: 'x'.repeat(32) as unknown as Buffer }], activeKeyId: 'k1' }],
    ['an id used twice', { keys: [k1, { ...k2, id: 'k1' }], activeKeyId: 'k1' }],
    ['an id with a space', { keys: [{ ...k1, id: 'my key' }], activeKeyId: 'my key' }],
    ['an active key not in the ring', { keys: [k1], activeKeyId: 'k2' }],
  ])('rejects %s at construction', (_name, options) => {
    expect(() => new IdempotencyCipher(options)).toThrow(IdempotencyConfigurationError);
  });

  it('does not keep a reference to the caller key buffer', () => {
    const key = randomBytes(32);
    const own = new IdempotencyCipher({ keys: [{ id: 'k', key }], activeKeyId: 'k' });
    const sealed = own.seal(RECORD, response);
    key.fill(0);
    expect(own.open(RECORD, sealed)).toEqual(response);
  });

  it('property: any response round-trips, and its body bytes never appear in the envelope', () => {
    const headerValue = fc.oneof(fc.string(), fc.array(fc.string(), { maxLength: 3 }));
    fc.assert(
      fc.property(
        fc.integer({ min: 100, max: 999 }),
        fc.dictionary(fc.string({ minLength: 1, maxLength: 20 }), headerValue, { maxKeys: 5 }),
        fc.option(fc.uint8Array({ minLength: 0, maxLength: 300 }), { nil: undefined }),
        fc.boolean(),
        (statusCode, headers, bytes, bodyOmitted) => {
          const original: StoredResponse = {
            statusCode,
            headers,
            ...(bytes !== undefined && !bodyOmitted && { body: Buffer.from(bytes) }),
            ...(bodyOmitted && { bodyOmitted: true }),
          };
          const sealed = cipher.seal(RECORD, original);
          expect(cipher.open(RECORD, sealed)).toEqual(original);
          if (original.body && original.body.length >= 8) expect(sealed.body!.includes(original.body)).toBe(false);
        },
      ),
      { numRuns: 200 },
    );
  });
});
