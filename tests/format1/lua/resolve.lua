-- resolve: an operator stores a result for an UNKNOWN outcome, or for a key whose owner was
-- lost (PENDING, its lease over: held by `on_owner_lost: keep`); never touches other states.
-- KEYS[1]  the record's key
-- ARGV[1]  encoded record metadata
-- ARGV[2]  inline body bytes
-- ARGV[3]  retention in milliseconds
-- Returns  1 if stored, 0 if the key holds no unknown outcome
redis.replicate_commands()  -- TIME before writes: needed before Redis 5, a no-op since
local v = redis.call('HMGET', KEYS[1], 's', 'l')
local unknown = v[1] == 'U'
if v[1] == 'P' and v[2] then
  local clock = redis.call('TIME')
  unknown = tonumber(v[2]) <= clock[1] * 1000 + math.floor(clock[2] / 1000)
end
if not unknown then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])  -- first: allowed at maxmemory (complete.lua)
-- The operator's result is the record: an owner that comes back late is fenced, not told
-- its own answer was stored.
redis.call('HSET', KEYS[1], 's', 'C', 'm', ARGV[1], 'b', ARGV[2], 't', 'operator')
redis.call('HDEL', KEYS[1], 'l', 'u', 'p')
return 1
