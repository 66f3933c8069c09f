import { randomBytes, timingSafeEqual } from 'node:crypto';

const TOKEN_BYTES = 16;

/**
 * Creates the random token that fences one claim of a record: every later write (complete,
 * release, lease renewal) must present it, so a zombie handler whose lease was taken over can
 * never overwrite the new owner's result (CONTRACT B.9 rule 27). 128 bits from the CSPRNG make
 * a guess or a collision between two claims practically impossible.
 *
 * @returns 22 base64url characters (16 random bytes, unpadded).
 * @publicApi
 */
export function newOwnerToken(): string {
  return randomBytes(TOKEN_BYTES).toString('base64url');
}

/**
 * Compares two owner tokens in constant time, so a caller that can submit tokens cannot learn
 * a stored one byte by byte from response timings. Tokens of different lengths are unequal;
 * their length is not secret (every token is 22 characters).
 *
 * @publicApi
 */
export function sameToken(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  return left.length === right.length && timingSafeEqual(left, right);
}
