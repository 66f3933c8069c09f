/**
 * One check of an `EventDeduplicator`, atomic: sets the id's bits in the current bucket (and
 * renews its expiry), then answers 1 ("maybe seen") when the bits were all set already there, in
 * the next bucket (marked by an instance whose clock is ahead) or in any older bucket of the
 * window, 0 ("new") otherwise. Every key shares one hash tag, so the
 * call runs on one Redis Cluster node.
 *
 * A new bucket is created at its full size with one SET: Redis grows a string that SETBIT
 * extends by doubling its allocation (below 1 MB), which would cost up to twice the memory.
 *
 * KEYS: the current bucket, the next one, then the older ones (newest first).
 * ARGV[1]: when the current bucket expires (ms since the epoch); ARGV[2]: a bucket's size in
 * bytes; ARGV[3..]: the bit positions.
 */
export const EVENT_DEDUP_CHECK_LUA = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], string.rep('\\0', tonumber(ARGV[2])))
end
local seen = 1
for i = 3, #ARGV do
  if redis.call('SETBIT', KEYS[1], ARGV[i], 1) == 0 then seen = 0 end
end
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
if seen == 1 then return 1 end
for b = 2, #KEYS do
  seen = 1
  for i = 3, #ARGV do
    if redis.call('GETBIT', KEYS[b], ARGV[i]) == 0 then
      seen = 0
      break
    end
  end
  if seen == 1 then return 1 end
end
return 0
`;
