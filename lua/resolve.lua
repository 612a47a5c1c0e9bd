-- resolve: an operator stores a result for an UNKNOWN outcome (never touches other states).
-- KEYS[1]  the record's key
-- ARGV[1]  encoded record metadata
-- ARGV[2]  inline body bytes
-- ARGV[3]  retention in milliseconds
-- Returns  1 if stored, 0 if the key holds no UNKNOWN outcome
if redis.call('HGET', KEYS[1], 's') ~= 'U' then
  return 0
end
redis.call('HSET', KEYS[1], 's', 'C', 'm', ARGV[1], 'b', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
