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

/**
 * A named prepared statement of the TypeORM store (`preparedStatements`, the default): after its
 * first use on a connection, node-postgres sends only its name (Bind), not its text.
 */
const PG_STORE_PREPARED = /idempotency_[0-9a-f]{32}/;
const latin1 = (chunk: Buffer) => chunk.toString('latin1');

/**
 * The durable claim of a transactional route: `BEGIN`, the insert-if-absent of the
 * `idempotency_records` row and the handler's savepoint, sent in one write (its text, or its
 * prepared statement's name beside the `BEGIN`).
 */
export const PG_DURABLE_CLAIM: ChunkPattern = (chunk) => {
  const text = latin1(chunk);
  return /INSERT INTO \S*idempotency_records/.test(text) || (/BEGIN/.test(text) && PG_STORE_PREPARED.test(text));
};
/**
 * The durable completion and the `COMMIT` behind it, sent in one write: the completion fails when
 * it changes no row, so the `COMMIT` commits the business writes only with the completed record.
 */
export const PG_DURABLE_COMPLETE_AND_COMMIT: ChunkPattern = (chunk) => {
  const text = latin1(chunk);
  return /COMMIT/.test(text) && (/SET state = 'completed'/.test(text) || PG_STORE_PREPARED.test(text));
};
