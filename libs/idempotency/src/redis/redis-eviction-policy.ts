/**
 * The startup check of Redis' `maxmemory-policy`: a server that may evict the store's keys
 * forgets records under memory pressure, and with them the promise that a retry does not run
 * the handler again (BullMQ checks the same for its queues).
 */
import { Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { IdempotencyConfigurationError } from '../errors/idempotency-configuration.error.js';

/**
 * What the store does when Redis may evict its keys (any `maxmemory-policy` but `noeviction`):
 * `refuse` to start, `warn` and start, or check nothing (`off`).
 *
 * @publicApi
 */
export type RedisEvictionPolicyCheck = 'refuse' | 'warn' | 'off';

const POLICY_CHECKS: readonly RedisEvictionPolicyCheck[] = ['refuse', 'warn', 'off'];

export function checkEvictionPolicyOption(value: unknown): RedisEvictionPolicyCheck {
  if (!POLICY_CHECKS.includes(value as RedisEvictionPolicyCheck)) {
    throw new TypeError(`evictionPolicy must be 'refuse', 'warn' or 'off', got ${JSON.stringify(value)}`);
  }
  return value as RedisEvictionPolicyCheck;
}

/**
 * Reads `maxmemory-policy` on every node (every master of a Cluster). A policy that can evict
 * the store's keys refuses to start or warns, per `check`; a server that does not let us read
 * it (`CONFIG` renamed or denied, as on some managed services) is a warning that says what to verify.
 */
export async function checkEvictionPolicy(
  nodes: readonly Redis[],
  server: string,
  check: RedisEvictionPolicyCheck,
): Promise<void> {
  if (check === 'off') return;
  const logger = new Logger('Idempotency');
  for (const node of nodes) {
    let policy: string;
    try {
      const reply = (await node.config('GET', 'maxmemory-policy')) as unknown;
      policy = Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : String(reply);
    } catch (error) {
      logger.warn(
        `could not read the maxmemory-policy of ${server} (${(error as Error).message}): make sure it is ` +
          "'noeviction', or Redis may evict idempotency records under memory pressure, and a retry of an evicted key " +
          "runs the handler again. Pass evictionPolicy: 'off' to RedisIdempotencyStore to skip this check.",
      );
      return;
    }
    if (policy === 'noeviction') continue;
    const which = policy.startsWith('volatile-') ? 'keys with a TTL, as every idempotency record has' : 'any key';
    const message =
      `${server} has maxmemory-policy '${policy}': when its memory is full Redis evicts ${which}, so idempotency ` +
      'records can vanish and a retry of an evicted key runs the handler again. Set maxmemory-policy to ' +
      "'noeviction' (redis.conf, CONFIG SET, or your provider's parameter group), give the store a Redis of its " +
      "own, or pass evictionPolicy: 'warn' to RedisIdempotencyStore to start anyway.";
    if (check === 'refuse') throw new IdempotencyConfigurationError(`Redis idempotency store cannot start: ${message}`);
    logger.warn(message);
  }
}
