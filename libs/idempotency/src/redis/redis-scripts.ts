/**
 * The Lua scripts of `RedisIdempotencyStore`, one per store operation. Each runs atomically on
 * the server, touches exactly one key (`KEYS[1]`, the record: cluster-safe), and takes its clock
 * from `redis.call('TIME')`, so leases and expiry never depend on the application servers' clocks.
 *
 * Record value: one binary string per record, written and read only by these scripts. A hash
 * would be easier to read with `redis-cli`, but any field longer than `hash-max-listpack-value`
 * (64 bytes by default) turns it into a full hashtable: a completed record with a 300-byte body
 * and three headers costs 848 bytes of Redis memory (`MEMORY USAGE`, Redis 7.0) as a hash, and
 * 600 (short headers) to 728 (typical Express headers) as this string uncompressed; the store
 * compresses headers and body together when that is smaller (flag 8, `response-packing.ts`),
 * which brings a 300-byte JSON order to 408 (short headers) to 472 (typical Express headers).
 * Layout (big-endian, Lua `struct` format `>BBI4I6I6I6I2I2c0I2c0I4c0` followed by the body):
 *
 * | bytes  | field                                                                     |
 * |--------|---------------------------------------------------------------------------|
 * | 1      | format version (1)                                                        |
 * | 1      | flags: 1 completed, 2 body omitted, 4 has a body, 8 packed (0 while in progress) |
 * | 4      | fencing token                                                             |
 * | 6 × 3  | createdAtMs, leaseExpiresAtMs, expiresAtMs (epoch ms of the Redis clock)  |
 * | 2      | status code (0 while in progress)                                         |
 * | 2 + n  | fingerprint                                                               |
 * | 2 + n  | owner token                                                               |
 * | 4 + n  | headers as compact JSON (empty while in progress, and when packed)        |
 * | rest   | body bytes, exactly as captured; packed: headers and body compressed      |
 *
 * The key carries a Redis expiry at `expiresAtMs` (PEXPIREAT), so Redis removes records by
 * itself; the scripts still treat `expiresAtMs <= now` as absent (docs/contract.md B.10 rule 30).
 *
 * Record reply (`<record>` below): ten elements, in this order: flags, fencingToken,
 * createdAtMs, leaseExpiresAtMs, expiresAtMs, statusCode (integers), fingerprint, ownerToken,
 * headers JSON, body (bulk strings).
 *
 * Errors: a key that holds anything these scripts did not write (another type, a truncated or
 * foreign value, an unknown format version) answers the error `IDEMPOTENCY_UNREADABLE <key>:
 * <why>`, and the scripts never overwrite it: the store fails closed.
 *
 * `complete`, `release` and a successful `takeOver` PUBLISH `completed`, `released` or
 * `taken-over` on the channel passed in ARGV, so waiters in any process wake up.
 */

/** Helpers shared by every script (prepended to each one; scripts define no globals). */
const PRELUDE = `
local RECORD = '>BBI4I6I6I6I2I2c0I2c0I4c0'
local VERSION = 1
local COMPLETED = 1
local HAS_BODY = 4
local PACKED = 8

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function unreadable(key, why)
  return 'IDEMPOTENCY_UNREADABLE ' .. key .. ': ' .. why
end

-- The live record of key; false when absent or expired; nil and a message when unreadable.
local function load(key, now)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' and raw.err then
    return nil, unreadable(key, 'the key does not hold a string (' .. raw.err .. ')')
  end
  if not raw then
    return false
  end
  local ok, version, flags, fencing, created, lease, expires, status, fp, owner, headers, pos =
    pcall(struct.unpack, RECORD, raw)
  if not ok then
    return nil, unreadable(key, 'the value is not a record (' .. tostring(version) .. ')')
  end
  if version ~= VERSION then
    return nil, unreadable(key, 'unknown record format version ' .. version)
  end
  local body = string.sub(raw, pos)
  if flags > 15 or (flags ~= 0 and flags % 2 == 0) or fencing < 1
      or (bit.band(flags, HAS_BODY + PACKED) == 0 and #body > 0)
      or (bit.band(flags, PACKED) ~= 0 and #headers > 0) then
    return nil, unreadable(key, 'inconsistent record fields')
  end
  if expires <= now then
    return false
  end
  return { flags = flags, fencing = fencing, created = created, lease = lease, expires = expires,
    status = status, fp = fp, owner = owner, headers = headers, body = body }
end

local function save(key, r)
  redis.call('SET', key, struct.pack(RECORD, VERSION, r.flags, r.fencing, r.created, r.lease,
    r.expires, r.status, #r.fp, r.fp, #r.owner, r.owner, #r.headers, r.headers) .. r.body)
  redis.call('PEXPIREAT', key, r.expires)
end

local function fresh(owner, fp, now, lease_ms, ttl_ms)
  return { flags = 0, fencing = 1, created = now, lease = now + lease_ms, expires = now + ttl_ms,
    status = 0, fp = fp, owner = owner, headers = '', body = '' }
end

local function record_reply(r)
  return { r.flags, r.fencing, r.created, r.lease, r.expires, r.status, r.fp, r.owner, r.headers, r.body }
end

local function claim_reply(kind, now, r)
  return { kind, now, r.flags, r.fencing, r.created, r.lease, r.expires, r.status, r.fp, r.owner,
    r.headers, r.body }
end

local function owned_in_progress(r, owner)
  return r and r.flags == 0 and r.owner == owner
end
`;

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
 * (unchanged) | error `IDEMPOTENCY_UNREADABLE`.
 */
export const CLAIM_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
if err then return redis.error_reply(err) end
if rec then return claim_reply(0, now, rec) end
rec = fresh(ARGV[1], ARGV[2], now, tonumber(ARGV[3]), tonumber(ARGV[4]))
save(KEYS[1], rec)
return claim_reply(1, now, rec)
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
 * ARGV[3]  headers as compact JSON
 * ARGV[4]  response flags: 2 body omitted, 4 has a body, 8 packed (then ARGV[3] is empty)
 * ARGV[5]  body bytes (empty when there is no body)
 * ARGV[6]  notification channel
 *
 * Reply: 1 completed | 0 not the owner, not in progress, absent or expired | error
 * `IDEMPOTENCY_UNREADABLE`.
 */
export const COMPLETE_SCRIPT = `${PRELUDE}
local now = now_ms()
local rec, err = load(KEYS[1], now)
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
local now = now_ms()
local rec, err = load(KEYS[1], now)
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
