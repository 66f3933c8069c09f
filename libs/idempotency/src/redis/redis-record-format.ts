/**
 * The stored format of a Redis idempotency record, and the Lua helpers (`PRELUDE`) that every
 * script of redis-scripts.ts starts with to read and write it (@internal).
 *
 * Record value: one binary string per record, written and read only by the store's scripts. A hash
 * would be easier to read with `redis-cli`, but any field longer than `hash-max-listpack-value`
 * (64 bytes by default) turns it into a full hashtable: a completed record with a 300-byte body
 * and three headers costs 848 bytes of Redis memory (`MEMORY USAGE`, Redis 7.0) as a hash, and
 * 600 (short headers) to 728 (typical Express headers) as this string uncompressed; the store
 * compresses headers and body together when that is smaller (flag 8, `response-packing.ts`),
 * which brings a 300-byte JSON order to 408 (short headers) to 472 (typical Express headers).
 * Since issue 31, only responses of more than 512 bytes are compressed; smaller ones store
 * their headers in the compact form of compact-headers.ts (flag 16) instead of JSON: 600 bytes
 * for the 310-byte order with typical Express headers, at no compression cost.
 * Format version 1 (0.1.0 wrote the same bytes, then set the expiry with a separate PEXPIREAT;
 * flag 16 is the one addition since). Rolling upgrade: this version reads every record older
 * versions wrote; 0.1.0's scripts refuse a record with flag 16 as unreadable (`flags > 15`), a
 * store error: a retry served by an instance not yet upgraded gets 503, or, on a route with
 * `onStoreError: 'fail-open'`, runs its handler again. The store option
 * `recordFormat: 'compatible'` writes only flags ≤ 15 (JSON headers, compressed when smaller)
 * and still reads both: deploy with it, then switch to `'compact'` once no 0.1.0 instance is
 * left. Layout (big-endian, Lua `struct` format
 * `>BBI4I6I6I6I2I2c0I2c0I4c0` followed by the body):
 *
 * | bytes  | field                                                                     |
 * |--------|---------------------------------------------------------------------------|
 * | 1      | format version (1)                                                        |
 * | 1      | flags: 1 completed, 2 body omitted, 4 has a body, 8 packed, 16 compact headers (0 while in progress) |
 * | 4      | fencing token                                                             |
 * | 6 × 3  | createdAtMs, leaseExpiresAtMs, expiresAtMs (epoch ms of the Redis clock)  |
 * | 2      | status code (0 while in progress)                                         |
 * | 2 + n  | fingerprint                                                               |
 * | 2 + n  | owner token                                                               |
 * | 4 + n  | headers as compact JSON, or flag 16: compact-headers.ts (empty while in progress, and when packed) |
 * | rest   | body bytes, exactly as captured; packed: headers and body compressed      |
 *
 * Every write sets the value and the key's Redis expiry together, `SET key value PXAT expiresAtMs`
 * (Redis 6.2+), so the key's expiry is always the record's `expiresAtMs` and Redis removes records
 * by itself. The claim script's `SET ... NX PXAT ... GET` (NX with GET: Redis 7.0+) is why the
 * store needs Redis 7.0; `RedisIdempotencyStore.onModuleInit` refuses an older server.
 *
 * Clock: scripts that hand out times (claim, takeOver, extend, restore) or compare them (get,
 * inProgress, forceDelete, and claim's existing record) read `TIME` and treat
 * `expiresAtMs <= now` as absent (docs/contract.md B.10 rule 30). `complete` and `release` read no
 * clock: Redis hides a key once its expiry has passed (a script sees the time it started at), and
 * that expiry is `expiresAtMs`, so a record they find is live. The one difference is the
 * millisecond `expiresAtMs` itself (Redis expires a key when now > expiry, the rule when
 * now >= expiresAtMs), plus a key whose expiry someone removed (PERSIST): there `complete` may
 * complete, or `release` delete, a record every clocked script already treats as absent. Nobody
 * can observe that record (every read is clocked, and the `SET PXAT` of `complete` keeps
 * expiresAtMs, so Redis drops it within the millisecond, at once when that lies in the past): only
 * the owner's own answer (true rather than false) differs, about a record that was its own.
 *
 * Record reply (`<record>` in the docs of redis-scripts.ts): ten elements, in this order: flags,
 * fencingToken, createdAtMs, leaseExpiresAtMs, expiresAtMs, statusCode (integers), fingerprint,
 * ownerToken, headers JSON, body (bulk strings).
 *
 * Errors: a key that holds anything the scripts did not write (another type, a truncated or
 * foreign value, an unknown format version) answers the error `IDEMPOTENCY_UNREADABLE <key>:
 * <why>`, and the scripts never overwrite it: the store fails closed.
 */

/** Helpers shared by every script (prepended to each one; scripts define no globals). */
export const PRELUDE = `
local RECORD = '>BBI4I6I6I6I2I2c0I2c0I4c0'
local VERSION = 1
local COMPLETED = 1
local HAS_BODY = 4
local PACKED = 8
local COMPACT_HEADERS = 16

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function unreadable(key, why)
  return 'IDEMPOTENCY_UNREADABLE ' .. key .. ': ' .. why
end

-- The record packed in raw (a GET or SET ... GET reply of key); nil and a message when it is not
-- a record the scripts wrote. Expiry is the caller's business.
local function decode(key, raw)
  local ok, version, flags, fencing, created, lease, expires, status, fp, owner, headers, pos =
    pcall(struct.unpack, RECORD, raw)
  if not ok then
    return nil, unreadable(key, 'the value is not a record (' .. tostring(version) .. ')')
  end
  if version ~= VERSION then
    return nil, unreadable(key, 'unknown record format version ' .. version)
  end
  local body = string.sub(raw, pos)
  if flags > 31 or (flags ~= 0 and flags % 2 == 0) or fencing < 1
      or (bit.band(flags, HAS_BODY + PACKED) == 0 and #body > 0)
      or (bit.band(flags, PACKED) ~= 0 and (#headers > 0 or bit.band(flags, COMPACT_HEADERS) ~= 0)) then
    return nil, unreadable(key, 'inconsistent record fields')
  end
  return { flags = flags, fencing = fencing, created = created, lease = lease, expires = expires,
    status = status, fp = fp, owner = owner, headers = headers, body = body }
end

-- A reply of redis.pcall that is an error: WRONGTYPE (the key holds another type) makes the
-- record unreadable; any other error (OOM, a server too old for a command's options) is
-- answered as it is.
local function failed(key, reply)
  if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply(unreadable(key, 'the key does not hold a string (' .. reply.err .. ')'))
  end
  return reply
end

-- The live record of key; false when absent or expired; nil and a message when unreadable.
-- now == nil skips the record's own expiry check and leaves it to Redis, which hides a key once
-- its expiry (= expiresAtMs) has passed: see "Clock" above for when that is enough.
local function load(key, now)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' and raw.err then
    return nil, unreadable(key, 'the key does not hold a string (' .. raw.err .. ')')
  end
  if not raw then
    return false
  end
  local rec, err = decode(key, raw)
  if not rec then
    return nil, err
  end
  if now and rec.expires <= now then
    return false
  end
  return rec
end

local function pack(r)
  return struct.pack(RECORD, VERSION, r.flags, r.fencing, r.created, r.lease, r.expires, r.status,
    #r.fp, r.fp, #r.owner, r.owner, #r.headers, r.headers) .. r.body
end

-- One command: the value and the key's expiry (PXAT: Redis 6.2+) together.
local function save(key, r)
  redis.call('SET', key, pack(r), 'PXAT', r.expires)
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
