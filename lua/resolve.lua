-- resolve: an operator stores a result for an UNKNOWN outcome, or for a key whose owner was
-- lost (PENDING, its lease over: held by `on_owner_lost: keep`); never touches other states.
-- The record keeps its format: a hash stays a hash, a format-2 string a string.
-- KEYS[1]  the record's key
-- ARGV[1]  encoded record metadata (format 1)
-- ARGV[2]  inline body bytes (format 1)
-- ARGV[3]  retention in milliseconds
-- ARGV[4]  the whole record (format 2), with the fingerprint of the value it replaces
-- ARGV[5]  the SHA-1 (hex) of the format-2 value the operator's tool read: another one there
--          now (the outcome came meanwhile) is left as it is
-- Returns  1 if stored, 0 if the key holds no unknown outcome (or not the one read)
redis.replicate_commands()  -- TIME before writes: needed before Redis 5, a no-op since
--[[ settled: gateway/core/layout.py ]]
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' then
  local old = redis.call('GET', KEYS[1])
  if settled(old) ~= 'U' or redis.sha1hex(old) ~= ARGV[5] then
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[3])  -- first: allowed at maxmemory (complete.lua)
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
  return 1
end
if kind ~= 'hash' then
  return 0
end
local v = redis.call('HMGET', KEYS[1], 's', 'l')
local unknown = v[1] == 'U'
local ends = tonumber(v[2])  -- nil when absent; strtod's: 'nan' and 'inf' are numbers to it
if ends and (ends ~= ends or math.abs(ends) == math.huge) then
  ends = nil  -- damaged: no lease known to be over
end
if v[1] == 'P' and ends then
  local clock = redis.call('TIME')
  unknown = ends <= clock[1] * 1000 + math.floor(clock[2] / 1000)
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
