-- complete: store the outcome, only for the current owner (fencing).
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- ARGV[2]  state to store: "C" (completed) or "U" (unknown outcome)
-- ARGV[3]  encoded record metadata (status, headers, body size, digest, blob pointer)
-- ARGV[4]  inline body bytes ("" when the body lives in the blob store)
-- ARGV[5]  retention in milliseconds
-- Returns  1 if stored (or already stored by this token: a repeated call, which renews the
--          retention, a write, so that a WAIT after the repeat also covers the first call),
--          0 if the token no longer owns the key (lease lost; nothing written)
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[2] ~= ARGV[1] then
  return 0
end
if v[1] ~= 'P' then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return 1
end
redis.call('HSET', KEYS[1], 's', ARGV[2], 'm', ARGV[3], 'b', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
