/**
 * The Lua scripts of `RedisIdempotencyStore`, one per store operation. Each runs atomically on
 * the server, touches exactly one key (`KEYS[1]`, the record: cluster-safe), and takes its clock
 * from `redis.call('TIME')`, so leases and expiry never depend on the application servers' clocks
 * (`complete` and `release` need none: "Clock" in redis-record-format.ts).
 *
 * Each script starts with `PRELUDE` (redis-record-format.ts): the record value layout, the
 * `<record>` reply and the `IDEMPOTENCY_UNREADABLE` error below are documented there.
 *
 * `complete`, `release` and a successful `takeOver` PUBLISH `completed`, `released` or
 * `taken-over` on the channel passed in ARGV, so waiters in any process wake up.
 *
 * `SCRIPT_COMMANDS` (at the end) names the ioredis command each script is registered as.
 */
import { PRELUDE } from './redis-record-format.js';

/**
 * `claim`: creates an `in_progress` record (fencing token 1) when the key is absent or expired.
 *
 * KEYS[1]  record key
 * ARGV[1]  owner token
 * ARGV[2]  fingerprint
 * ARGV[3]  lease length in ms (positive integer)
 * ARGV[4]  record lifetime in ms (positive integer)
 *
 * Reply: `{1, nowMs, <record>}` claimed (the new record) | `{0, nowMs, <record>}` existing
 * (unchanged) | error `IDEMPOTENCY_UNREADABLE` | the error of `SET` itself (`OOM`; a syntax
 * error on a server older than Redis 7.0).
 */
export const CLAIM_SCRIPT = `${PRELUDE}
local now = now_ms()
local owner, fp = ARGV[1], ARGV[2]
local lease, expires = now + tonumber(ARGV[3]), now + tonumber(ARGV[4])
-- The new record, packed straight from its fields (what pack(fresh(...)) gives, without the
-- table: most claims of a busy key are replays, which throw it away).
local value = struct.pack(RECORD, VERSION, 0, 1, now, lease, expires, 0, #fp, fp, #owner, owner, 0, '')
-- One command claims an absent key or answers what it holds: NX never overwrites (a live record,
-- a foreign value, another type), and GET (with NX: Redis 7.0+) returns the old value or nil.
local raw = redis.pcall('SET', KEYS[1], value, 'NX', 'PXAT', expires, 'GET')
if type(raw) == 'table' and raw.err then return failed(KEYS[1], raw) end
if raw then
  local old, err = decode(KEYS[1], raw)
  if not old then return redis.error_reply(err) end
  if old.expires > now then return claim_reply(0, now, old) end
  -- Expired by its own clock but not yet by Redis's (the key lives through the millisecond
  -- expiresAtMs itself), or a key whose expiry was removed: absent, as load() would say.
  redis.call('SET', KEYS[1], value, 'PXAT', expires)
end
return { 1, now, 0, 1, now, lease, expires, 0, fp, owner, '', '' }
`;

/**
 * `takeOver`: compare-and-set of a dead claim. When the record is `in_progress`, owned by
 * ARGV[1] and its lease has lapsed (`leaseExpiresAtMs <= now`), replaces owner, fingerprint and
 * lease (fencing token + 1, createdAtMs kept, expiresAtMs = now + ttl) and publishes
 * `taken-over`. When the key is absent or expired, claims it as `claim` does.
 *
 * KEYS[1]  record key
 * ARGV[1]  expected (dead) owner token
 * ARGV[2]  new owner token
 * ARGV[3]  new fingerprint
 * ARGV[4]  lease length in ms
 * ARGV[5]  record lifetime in ms
 * ARGV[6]  notification channel
 *
 * Reply: as `claim`.
 */
export const TAKE_OVER_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
if err then return redis.error_reply(err) end
if not rec then
  rec = fresh(ARGV[2], ARGV[3], now, tonumber(ARGV[4]), tonumber(ARGV[5]))
  save(KEYS[1], rec)
  return claim_reply(1, now, rec)
end
if not owned_in_progress(rec, ARGV[1]) or rec.lease > now then
  return claim_reply(0, now, rec)
end
rec.owner = ARGV[2]
rec.fp = ARGV[3]
rec.fencing = rec.fencing + 1
rec.lease = now + tonumber(ARGV[4])
rec.expires = now + tonumber(ARGV[5])
save(KEYS[1], rec)
redis.call('PUBLISH', ARGV[6], 'taken-over')
return claim_reply(1, now, rec)
`;

/**
 * `complete`: stores the response when the record is `in_progress` and owned by ARGV[1], keeps
 * expiresAtMs (and the key's expiry), and publishes `completed`.
 *
 * KEYS[1]  record key
 * ARGV[1]  owner token
 * ARGV[2]  status code (integer, 100–999)
 * ARGV[3]  headers as compact JSON, or in the compact form of compact-headers.ts (flag 16)
 * ARGV[4]  response flags: 2 body omitted, 4 has a body, 8 packed (then ARGV[3] is empty), 16 compact headers
 * ARGV[5]  body bytes (empty when there is no body)
 * ARGV[6]  notification channel
 *
 * Reply: 1 completed | 0 not the owner, not in progress, absent or expired | error
 * `IDEMPOTENCY_UNREADABLE`.
 */
export const COMPLETE_SCRIPT = `${PRELUDE}
-- No TIME: Redis's own expiry of the key is the record's (see "Clock" in redis-record-format.ts).
local rec, err = load(KEYS[1])
if err then return redis.error_reply(err) end
if not owned_in_progress(rec, ARGV[1]) then return 0 end
rec.flags = COMPLETED + tonumber(ARGV[4])
rec.status = tonumber(ARGV[2])
rec.headers = ARGV[3]
rec.body = ARGV[5]
save(KEYS[1], rec)
redis.call('PUBLISH', ARGV[6], 'completed')
return 1
`;

/**
 * `release`: deletes the record when it is `in_progress` and owned by ARGV[1], and publishes
 * `released`.
 *
 * KEYS[1]  record key
 * ARGV[1]  owner token
 * ARGV[2]  notification channel
 *
 * Reply: 1 released | 0 otherwise | error `IDEMPOTENCY_UNREADABLE`.
 */
export const RELEASE_SCRIPT = `${PRELUDE}
-- No TIME: Redis's own expiry of the key is the record's (see "Clock" in redis-record-format.ts).
local rec, err = load(KEYS[1])
if err then return redis.error_reply(err) end
if not owned_in_progress(rec, ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
`;

/**
 * `extend`: renews the lease (leaseExpiresAtMs = now + ARGV[2]) when the record is
 * `in_progress` and owned by ARGV[1], also after the lease lapsed as long as nobody took over.
 *
 * KEYS[1]  record key
 * ARGV[1]  owner token
 * ARGV[2]  lease length in ms
 *
 * Reply: 1 renewed | 0 the claim is lost (or absent) | error `IDEMPOTENCY_UNREADABLE`.
 */
export const EXTEND_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
if err then return redis.error_reply(err) end
if not owned_in_progress(rec, ARGV[1]) then return 0 end
rec.lease = now + tonumber(ARGV[2])
-- A live claim outlives its TTL: the record must not expire under a running handler.
if rec.expires < rec.lease then rec.expires = rec.lease end
save(KEYS[1], rec)
return 1
`;

/**
 * `get`: the live record.
 *
 * KEYS[1]  record key
 *
 * Reply: `<record>` | nil when absent or expired | error `IDEMPOTENCY_UNREADABLE`.
 */
export const GET_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
if err then return redis.error_reply(err) end
if not rec then return false end
return record_reply(rec)
`;

/**
 * `restore`: writes a record as it is (repair from the durable tier) when the key is absent or
 * expired. A record that is already expired is not written.
 *
 * KEYS[1]  record key
 * ARGV[1]  flags (as in the value layout)
 * ARGV[2]  fencing token
 * ARGV[3]  createdAtMs
 * ARGV[4]  leaseExpiresAtMs
 * ARGV[5]  expiresAtMs
 * ARGV[6]  status code (0 while in progress)
 * ARGV[7]  fingerprint
 * ARGV[8]  owner token
 * ARGV[9]  headers as compact JSON (empty while in progress)
 * ARGV[10] body bytes
 *
 * Reply: 1 written | 0 a live record exists, or the record is already expired | error
 * `IDEMPOTENCY_UNREADABLE`.
 */
export const RESTORE_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
if err then return redis.error_reply(err) end
if rec then return 0 end
local expires = tonumber(ARGV[5])
if expires <= now then return 0 end
save(KEYS[1], { flags = tonumber(ARGV[1]), fencing = tonumber(ARGV[2]), created = tonumber(ARGV[3]),
  lease = tonumber(ARGV[4]), expires = expires, status = tonumber(ARGV[6]), fp = ARGV[7],
  owner = ARGV[8], headers = ARGV[9], body = ARGV[10] })
return 1
`;

/**
 * `inProgress`: the record when it is live, `in_progress` and at least ARGV[1] ms old by the
 * Redis clock (for `listInProgress`, one call per scanned key: completed records and their
 * bodies never leave the server).
 *
 * KEYS[1]  record key
 * ARGV[1]  minimum age in ms (`now - createdAtMs`)
 *
 * Reply: `{nowMs, <record>}` | nil otherwise | error `IDEMPOTENCY_UNREADABLE`.
 */
export const IN_PROGRESS_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
if err then return redis.error_reply(err) end
if not rec or rec.flags ~= 0 or now - rec.created < tonumber(ARGV[1]) then return false end
local reply = record_reply(rec)
table.insert(reply, 1, now)
return reply
`;

/**
 * `forceDelete`: deletes the record whoever owns it (an operator's repair) and publishes
 * `released`. With ARGV[1] = `in-progress` only a live `in_progress` record is deleted (a
 * completed one keeps answering retries); with `any` the key goes whatever it holds, an
 * unreadable value included.
 *
 * KEYS[1]  record key
 * ARGV[1]  `in-progress` | `any`
 * ARGV[2]  notification channel
 *
 * Reply: 1 deleted | 0 nothing to delete | error `IDEMPOTENCY_UNREADABLE` (`in-progress` only).
 */
export const FORCE_DELETE_SCRIPT = `${PRELUDE}
if ARGV[1] == 'in-progress' then
  local rec, err = load(KEYS[1], now_ms())
  if err then return redis.error_reply(err) end
  if not rec or rec.flags ~= 0 then return 0 end
end
local deleted = redis.call('DEL', KEYS[1])
if deleted == 1 then redis.call('PUBLISH', ARGV[2], 'released') end
return deleted
`;

/**
 * The Lua source of every script the Redis store runs, by store operation. ioredis sends a
 * script's text once per connection (EVAL), then its SHA-1 (EVALSHA): hash a source to find
 * its calls in `SLOWLOG`, `MONITOR` or a latency report.
 *
 * @publicApi
 */
export const REDIS_STORE_SCRIPTS = Object.freeze({
  claim: CLAIM_SCRIPT,
  takeOver: TAKE_OVER_SCRIPT,
  complete: COMPLETE_SCRIPT,
  release: RELEASE_SCRIPT,
  extend: EXTEND_SCRIPT,
  get: GET_SCRIPT,
  restore: RESTORE_SCRIPT,
  listInProgress: IN_PROGRESS_SCRIPT,
  forceDelete: FORCE_DELETE_SCRIPT,
});

/** The ioredis command each script is registered as (`defineCommand`, one key each). @internal */
export const SCRIPT_COMMANDS = {
  idempotencyClaim: CLAIM_SCRIPT,
  idempotencyTakeOver: TAKE_OVER_SCRIPT,
  idempotencyComplete: COMPLETE_SCRIPT,
  idempotencyRelease: RELEASE_SCRIPT,
  idempotencyExtend: EXTEND_SCRIPT,
  idempotencyGet: GET_SCRIPT,
  idempotencyRestore: RESTORE_SCRIPT,
  idempotencyInProgress: IN_PROGRESS_SCRIPT,
  idempotencyForceDelete: FORCE_DELETE_SCRIPT,
} as const;

type Arg = string | Buffer | number;
type Send = (key: string, ...args: Arg[]) => Promise<unknown>;
/** The commands `defineCommand` adds; the `Buffer` variants answer bulk strings as Buffers. @internal */
export type ScriptCommands = { [Name in keyof typeof SCRIPT_COMMANDS]: Send } & {
  [Name in keyof typeof SCRIPT_COMMANDS as `${Name}Buffer`]: Send;
};
