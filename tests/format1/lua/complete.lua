-- complete: store the outcome of an upstream call, unless a newer claim holds the key (fencing).
-- KEYS[1]  the record's key
-- ARGV[1]  owner token
-- ARGV[2]  state to store: "C" (completed) or "U" (unknown outcome)
-- ARGV[3]  encoded record metadata (status, headers, body size, digest, blob pointer)
-- ARGV[4]  inline body bytes ("" when the body lives in the blob store)
-- ARGV[5]  retention in milliseconds
-- ARGV[6]  the request's fingerprint (kept, so that retries are still compared against it)
-- Returns  1 if stored: the token owns the PENDING key, or the key is gone (the lease and its
--            hold ended and nobody claimed since: a stalled owner's outcome is kept, never
--            run again); also for a repeated call of the same token, which renews the
--            retention (a write, so that a WAIT after the repeat also covers the first call);
--            also for an owner thought lost ('p', claim.lua) whose key is still unsettled
--            (PENDING under a taker) or holds the UNKNOWN outcome recorded meanwhile: the
--            answer that really came becomes the record, and the taker is fenced
--          0 if another token holds the key (a newer claim, or its outcome): nothing written
-- The PEXPIRE comes first: it is a write that Redis allows at maxmemory, and after a script's
-- first write Redis lets the rest run too, so an outcome that already ran upstream is stored
-- even on a full `noeviction` Redis, where new claims are refused.
local v = redis.call('HMGET', KEYS[1], 's', 't', 'p')
if not v[1] then
  redis.call('HSET', KEYS[1], 's', ARGV[2], 't', ARGV[1], 'f', ARGV[6], 'm', ARGV[3], 'b', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return 1
end
if v[2] ~= ARGV[1] then
  if v[3] == ARGV[1] and (v[1] == 'U' or v[1] == 'P') then
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    redis.call('HSET', KEYS[1], 's', ARGV[2], 't', ARGV[1], 'm', ARGV[3], 'b', ARGV[4])
    redis.call('HDEL', KEYS[1], 'p')
    return 1
  end
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if v[1] == 'P' then
  redis.call('HSET', KEYS[1], 's', ARGV[2], 'm', ARGV[3], 'b', ARGV[4])
  redis.call('HDEL', KEYS[1], 'l')
end
return 1
