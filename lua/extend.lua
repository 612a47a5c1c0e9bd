-- extend: renew the lease of a PENDING key, only for its current owner.
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- ARGV[2]  lease in milliseconds
-- Returns  1 if renewed, 0 if the token no longer owns the key (lease lost)
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] == 'P' and v[2] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
