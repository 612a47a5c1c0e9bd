-- extend: renew the lease of a PENDING key, only for its current owner.
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds; 0 lets the key go as its owner's lost (claim.lua), kept
-- ARGV[3]  hold in milliseconds: how long the key outlives the lease (0: it ends with it,
--          and the key is free again)
-- Returns  1 if renewed, 0 if the token no longer owns the key (lease lost)
redis.replicate_commands()  -- TIME before writes: needed before Redis 5, a no-op since
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] == 'P' and v[2] == ARGV[1] then
  local clock = redis.call('TIME')
  local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
  -- PEXPIRE first: a write Redis allows at maxmemory, after which the rest runs too, so a
  -- lease is renewed on a full `noeviction` Redis (complete.lua says why).
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(ARGV[2]) + tonumber(ARGV[3])))
  redis.call('HSET', KEYS[1], 'l', now + tonumber(ARGV[2]))
  return 1
end
return 0
