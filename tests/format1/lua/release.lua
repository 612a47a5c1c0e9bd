-- release: forget a PENDING key so that a retry runs again, only for its current owner.
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- Returns  1 if deleted, or if the key is gone already (a repeated call whose first reply
--          was lost); 0 if another token owns the key or an outcome is stored
local v = redis.call('HMGET', KEYS[1], 's', 't')
if not v[1] then
  return 1
end
if v[1] == 'P' and v[2] == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
