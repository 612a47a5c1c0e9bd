-- release: forget a PENDING key so that a retry runs again, only for its current owner.
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- Returns  1 if deleted, 0 if the token no longer owns the key
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] == 'P' and v[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
