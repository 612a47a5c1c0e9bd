-- sent: mark a claimed key as possibly sent upstream (routes with `mark_sent`), so that if its
-- owner dies now, the next claim treats it as a lost owner rather than a free key.
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- Returns  1 if marked, 0 if the token no longer owns the key (nothing may be sent then)
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] == 'P' and v[2] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'u')
  return 1
end
return 0
