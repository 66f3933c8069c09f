import { randomFillSync, timingSafeEqual } from 'node:crypto';

const TOKEN_BYTES = 16;
/** Random bytes drawn from the CSPRNG in one call and handed out 16 at a time: a call per token costs ten times more. */
const pool = Buffer.alloc(TOKEN_BYTES * 256);
let poolOffset = pool.length;

/**
 * Creates the random token that fences one claim of a record: every later write (complete,
 * release, lease renewal) must present it, so a zombie handler whose lease was taken over can
 * never overwrite the new owner's result (docs/contract.md B.9 rule 27). 128 bits from the CSPRNG make
 * a guess or a collision between two claims practically impossible.
 *
 * @returns 22 base64url characters (16 random bytes, unpadded).
 */
export function newOwnerToken(): string {
  if (poolOffset === pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const token = pool.toString('base64url', poolOffset, poolOffset + TOKEN_BYTES);
  poolOffset += TOKEN_BYTES;
  return token;
}

/**
 * Compares two owner tokens in constant time, so a caller that can submit tokens cannot learn
 * a stored one byte by byte from response timings. Tokens of different lengths are unequal;
 * their length is not secret (every token is 22 characters).
 */
export function sameToken(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  return left.length === right.length && timingSafeEqual(left, right);
}
