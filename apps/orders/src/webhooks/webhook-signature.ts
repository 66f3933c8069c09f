import { createHmac, timingSafeEqual } from 'node:crypto';

/** The request header that carries the provider's signature: `sha256=<64 hex digits>`. */
export const SIGNATURE_HEADER = 'x-signature';

const SIGNATURE = /^sha256=([0-9a-f]{64})$/i;

/** The `X-Signature` value for `body`: `sha256=` + hex HMAC-SHA256 of the raw bytes with `secret`. */
export function signWebhookBody(body: Buffer | string, secret: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** Why a signature was refused, or that it matched. */
export type SignatureCheck = 'valid' | 'missing' | 'malformed' | 'mismatch';

/**
 * Checks the header against the HMAC of the raw body bytes (never a re-serialized body: any
 * byte changed is a mismatch). The digests are compared in constant time, so the time taken
 * says nothing about how many leading bytes of a forged signature were right. A repeated
 * header (Node joins repeats with ", ") is malformed. Pure, for the guard and its unit tests.
 */
export function checkWebhookSignature(
  rawBody: Buffer,
  header: string | string[] | undefined,
  secret: string,
): SignatureCheck {
  if (header === undefined || (typeof header === 'string' && header.trim() === '')) {
    return 'missing';
  }
  const match = Array.isArray(header) ? null : SIGNATURE.exec(header.trim());
  if (!match) {
    return 'malformed';
  }
  const expected = createHmac('sha256', secret).update(rawBody).digest();
  const given = Buffer.from(match[1], 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected) ? 'valid' : 'mismatch';
}
