-- claim: take an idempotency key, or report what holds it. One round trip.
-- KEYS[1]  the record's key (hash-tagged, one Cluster slot)
-- ARGV[1]  request fingerprint
-- ARGV[2]  fresh owner token
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  now, in unix milliseconds (kept as the claim's start, for operators)
-- ARGV[5]  hold in milliseconds: how long a PENDING key outlives its lease, so that a key
--          whose owner stopped renewing is known as such rather than free (the retention)
-- ARGV[6]  on a lost owner: "take" (this request becomes the owner and decides) or "hold"
--          (answer LOST and write nothing: retries get 409 until the hold ends)
-- ARGV[7]  "1" when the route marks sends: the key counts as unsent until `sent` says so
-- Returns  {"CLAIMED"}                          absent: now PENDING, owned by ARGV[2]
--          {"UNSENT"}                           its owner died before sending: owned anew
--          {"IN_FLIGHT", lease_left_ms}         PENDING under a live owner
--          {"TAKEN"}                            its owner stopped renewing after it may have
--                                               sent: ARGV[2] owns it now and must settle it
--          {"LOST"}                             the same, left as it is ("hold")
--          {"MISMATCH"}                         held with another fingerprint
--          {"DONE", state, meta, body, pttl_ms} COMPLETED ("C") or UNKNOWN outcome ("U")
-- The lease's end is a field ('l', Redis's clock) rather than the key's TTL: a key outlives
-- its owner, so that a retry never runs a call that may have run. The same call repeated
-- (same token: a pipeline resending after a broken connection) answers as the first did,
-- CLAIMED or TAKEN, and renews the lease.
redis.replicate_commands()  -- TIME before writes: needed before Redis 5, a no-op since
local v = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'm', 'b', 'l', 'u', 'o', 'p')
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local lease = tonumber(ARGV[3])
local ttl = lease + (tonumber(ARGV[5]) or 0)  -- absent: a caller of before the hold
local state = v[1]
if not state then
  redis.call('HSET', KEYS[1], 's', 'P', 't', ARGV[2], 'f', ARGV[1], 'c', ARGV[4], 'l', now + lease)
  if ARGV[7] == '1' then
    redis.call('HSET', KEYS[1], 'u', '1')
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {'CLAIMED'}
end
if v[2] ~= ARGV[1] then
  return {'MISMATCH'}
end
if state == 'P' then
  if v[3] == ARGV[2] then  -- answered as the first call was: a takeover leaves 'p'
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('HSET', KEYS[1], 'l', now + lease)
    return {v[9] and 'TAKEN' or 'CLAIMED'}
  end
  -- A key an earlier version claimed has no 'l': its TTL is its lease.
  local left = v[6] and (tonumber(v[6]) - now) or redis.call('PTTL', KEYS[1])
  if left > 0 then
    return {'IN_FLIGHT', left}
  end
  if v[7] then  -- marked unsent and never marked sent: nothing left the gateway
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('HSET', KEYS[1], 't', ARGV[2], 'c', ARGV[4], 'l', now + lease)
    if ARGV[7] ~= '1' then  -- this route sends unmarked: from now on it may be sent
      redis.call('HDEL', KEYS[1], 'u')
    end
    return {'UNSENT'}
  end
  if ARGV[6] == 'hold' then
    return {'LOST'}
  end
  -- 'p' keeps the first lost owner's token (the one that sent): if it was only stalled, its
  -- answer may yet become the record (complete.lua); a later taker never replaces it.
  local lost = (tonumber(v[8]) or 0) + 1
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('HSET', KEYS[1], 't', ARGV[2], 'p', v[9] or v[3], 'l', now + lease, 'o', lost)
  return {'TAKEN'}
end
return {'DONE', state, v[4], v[5] or '', redis.call('PTTL', KEYS[1])}
