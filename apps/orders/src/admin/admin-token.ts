import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * Whether an `Authorization` field value is `Bearer <token>` for `expected`. Both tokens are
 * hashed first, so the comparison takes the same time whatever the length or the first
 * difference of what was sent (constant time). Pure, unit-tested.
 */
export function isAdminBearer(authorization: string | string[] | undefined, expected: string): boolean {
  if (typeof authorization !== 'string') return false;
  const match = /^Bearer +(\S+) *$/i.exec(authorization);
  const sent = createHash('sha256')
    .update(match?.[1] ?? '')
    .digest();
  const wanted = createHash('sha256').update(expected).digest();
  return timingSafeEqual(sent, wanted) && match !== null;
}
