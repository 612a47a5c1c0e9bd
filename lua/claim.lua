-- claim: take an idempotency key, or report what holds it. One round trip.
-- KEYS[1]  the record's key (hash-tagged, one Cluster slot)
-- ARGV[1]  request fingerprint
-- ARGV[2]  fresh owner token
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  now, in unix milliseconds (kept as the claim's start)
-- Returns  {"CLAIMED"}                          absent: now PENDING, owned by ARGV[2]
--          {"IN_FLIGHT", pttl_ms}               PENDING under another owner
--          {"MISMATCH"}                         held with another fingerprint
--          {"DONE", state, meta, body, pttl_ms} COMPLETED ("C") or UNKNOWN outcome ("U")
-- The same call repeated (same token: redis-py retrying after a timeout) answers CLAIMED and
-- renews the lease: a write, so that a WAIT after the repeat also covers the first call.
local v = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'm', 'b')
local state = v[1]
if not state then
  redis.call('HSET', KEYS[1], 's', 'P', 't', ARGV[2], 'f', ARGV[1], 'c', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'CLAIMED'}
end
if v[2] ~= ARGV[1] then
  return {'MISMATCH'}
end
if state == 'P' then
  if v[3] == ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {'CLAIMED'}
  end
  return {'IN_FLIGHT', redis.call('PTTL', KEYS[1])}
end
return {'DONE', state, v[4], v[5] or '', redis.call('PTTL', KEYS[1])}
