import { createHash } from 'node:crypto';
import { REDIS_STORE_SCRIPTS } from 'nestjs-idempotency/redis';
import type { ChunkPattern } from './tcp-proxy.js';

/**
 * How each step of the idempotency layer looks on the wire, for faults aimed at one step
 * (`TcpProxy.arm`). The Redis store runs one Lua script per operation: ioredis sends a script's
 * text (EVAL) the first time on a connection, then only its SHA-1 (EVALSHA).
 */
const SCRIPTS: readonly string[] = Object.values(REDIS_STORE_SCRIPTS);
/** The scripts share a prelude; their last lines tell them apart. */
const TAIL_CHARS = 120;

function redisScriptCall(lua: string): ChunkPattern {
  const sha = createHash('sha1').update(lua).digest('hex');
  const tail = lua.slice(-TAIL_CHARS);
  if (SCRIPTS.some((other) => other !== lua && other.endsWith(tail)))
    throw new Error('two store scripts end alike: lengthen TAIL_CHARS');
  return (chunk) => chunk.includes(sha) || chunk.includes(tail);
}

/** The Redis store's `claim` (the fast claim of a new request). */
export const REDIS_CLAIM = redisScriptCall(REDIS_STORE_SCRIPTS.claim);
/** The Redis store's `complete` (on transactional routes: the fast tier following the commit). */
export const REDIS_COMPLETE = redisScriptCall(REDIS_STORE_SCRIPTS.complete);

/** The durable claim: the insert-if-absent of the `idempotency_records` row. */
export const PG_DURABLE_CLAIM = /INSERT INTO \S*idempotency_records/;
/** The durable completion, inside the business transaction. */
export const PG_DURABLE_COMPLETE = /UPDATE \S*idempotency_records\S* SET state = 'completed'/;
/** The end of a transaction (simple query protocol). */
export const PG_COMMIT = /COMMIT/;
