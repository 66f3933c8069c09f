/**
 * `nestjs-idempotency/redis`: the Redis fast tier. The only part of the library that imports
 * `ioredis`, so an application without Redis never loads it.
 */
export { RedisIdempotencyStore, type RedisIdempotencyStoreOptions } from './redis-idempotency.store.js';
export type { RedisEvictionPolicyCheck } from './redis-eviction-policy.js';
export { REDIS_FAIL_FAST_OPTIONS } from './redis-connection.js';
export { REDIS_STORE_SCRIPTS } from './redis-scripts.js';
export {
  EventDeduplicator,
  type DedupStats,
  type DedupVerdict,
  type EventDeduplicatorOptions,
} from './event-deduplicator.js';
export { sizeEventDeduplicator, type EventDedupSizing, type EventDedupSizingInput } from './event-dedup-sizing.js';
