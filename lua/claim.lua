-- claim: take an idempotency key, or report what holds it. One round trip.
-- KEYS[1]  the record's key in the format this gateway writes: a new claim is made here
-- KEYS[2]  the record's key in the other format (the same Cluster slot; KEYS[1] again when
--          only one name is to be looked at): read, never made
-- ARGV[1]  request fingerprint
-- ARGV[2]  fresh owner token
-- ARGV[3]  lease in milliseconds
-- ARGV[4]  now, in unix milliseconds (kept as the claim's start, for operators)
-- ARGV[5]  hold in milliseconds: how long a PENDING key outlives its lease, so that a key
--          whose owner stopped renewing is known as such rather than free (the retention)
-- ARGV[6]  on a lost owner: "take" (this request becomes the owner and decides) or "hold"
--          (answer LOST and write nothing: retries get 409 until the hold ends)
-- ARGV[7]  "1" when the route marks sends: the key counts as unsent until `sent` says so
-- ARGV[8]  the fingerprint as a format-2 value of release 0007fac holds it
-- ARGV[9]  the fingerprint as a format-2 value of this release holds it (gateway/core/layout.py)
-- ARGV[10] "peek": look only, write nothing (a PENDING key is IN_FLIGHT, its lease over or not)
-- Returns  {"CLAIMED", at}                       absent: now PENDING, owned by ARGV[2]
--          {"UNSENT", at}                        its owner died before sending: owned anew
--          {"IN_FLIGHT", at, lease_left_ms}      PENDING under a live owner
--          {"TAKEN", at, lost_token}             its owner stopped renewing after it may have
--                                                sent: ARGV[2] owns it now and must settle it;
--                                                `lost_token` the owner's that sent
--          {"LOST", at}                          the same, left as it is ("hold")
--          {"MISMATCH", at, value}               held with another fingerprint (`value`: a
--                                                format-2 record's, checked before a 422; '' for
--                                                a hash)
--          {"DONE", at, state, meta, body, pttl} a format-1 record: COMPLETED ("C") or UNKNOWN
--                                                outcome ("U")
--          {"RECORD", at, value, pttl}           a format-2 record, or a value that cannot be
--                                                read as one, or a hash with no state or a
--                                                lease end that is no number ('': damaged, the
--                                                gateway says record-corrupt)
--          {"ABSENT", at}                        "peek" only: nothing under either name
--          `at` is 1 or 2: the KEYS entry that holds the key. gateway/store/replies.py names
--          each reply's fields; a test holds this list to it.
-- A PENDING key is a hash in either format; a settled one is a hash in format 1, a string in
-- format 2. The lease's end is a field ('l', Redis's clock) rather than the key's TTL: a key
-- outlives its owner, so that a retry never runs a call that may have run. The same call
-- repeated (same token: a pipeline resending after a broken connection) answers as the
-- first did, CLAIMED or TAKEN, and renews the lease.
redis.replicate_commands()  -- TIME before writes: needed before Redis 5, a no-op since
--[[ settled: gateway/core/layout.py ]]
local key, at = KEYS[1], 1
local kind = redis.call('TYPE', key)['ok']
if kind == 'none' then
  local other = redis.call('TYPE', KEYS[2])['ok']
  if other ~= 'none' then
    key, at, kind = KEYS[2], 2, other
  end
end
local peek = ARGV[10] == 'peek'
if kind == 'string' then
  local value = redis.call('GET', key)
  local state, fingerprint, _, identity = settled(value)
  local own = identity == '' and ARGV[8] or ARGV[9]  -- a value of 0007fac: its fingerprint
  if state and fingerprint ~= own and fingerprint ~= ANY then
    return {'MISMATCH', at, value}
  end
  return {'RECORD', at, value, redis.call('PTTL', key)}
elseif kind ~= 'hash' and kind ~= 'none' then
  return {'RECORD', at, '', redis.call('PTTL', key)}  -- not a record: never a free key
end
if peek and kind == 'none' then
  return {'ABSENT', at}
end
local v = {}
if kind == 'hash' then
  v = redis.call('HMGET', key, 's', 'f', 't', 'm', 'b', 'l', 'u', 'o', 'p')
end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local lease = tonumber(ARGV[3])
local ttl = lease + tonumber(ARGV[5])
local state = v[1]
if kind == 'hash' and not state then  -- a hash with no state: damaged, never a free key
  return {'RECORD', at, '', redis.call('PTTL', key)}
end
if not state then
  redis.call('HSET', key, 's', 'P', 't', ARGV[2], 'f', ARGV[1], 'c', ARGV[4], 'l', now + lease)
  if ARGV[7] == '1' then
    redis.call('HSET', key, 'u', '1')
  end
  redis.call('PEXPIRE', key, ttl)
  return {'CLAIMED', at}
end
if v[2] ~= ARGV[1] then
  return {'MISMATCH', at, ''}
end
if state == 'P' then
  if v[3] == ARGV[2] and not peek then  -- answered as the first call was
    redis.call('PEXPIRE', key, ttl)
    redis.call('HSET', key, 'l', now + lease)
    if v[9] then
      return {'TAKEN', at, v[9]}
    end
    return {'CLAIMED', at}
  end
  -- A claim with no 'l' holds its lease in its TTL alone: the TTL left is the lease left,
  -- so that such a key is in flight until it ends, never taken from a live owner.
  local ends = tonumber(v[6])  -- strtod's: 'nan' and 'inf' are numbers to it
  if v[6] and not (ends and ends == ends and math.abs(ends) ~= math.huge) then
    return {'RECORD', at, '', redis.call('PTTL', key)}  -- damaged: never a free key
  end
  local left = ends and (ends - now) or redis.call('PTTL', key)
  if left > 0 or peek then
    return {'IN_FLIGHT', at, math.max(left, 0)}
  end
  if v[7] then  -- marked unsent and never marked sent: nothing left the gateway
    redis.call('PEXPIRE', key, ttl)
    redis.call('HSET', key, 't', ARGV[2], 'c', ARGV[4], 'l', now + lease)
    if ARGV[7] ~= '1' then  -- this route sends unmarked: from now on it may be sent
      redis.call('HDEL', key, 'u')
    end
    return {'UNSENT', at}
  end
  if ARGV[6] == 'hold' then
    return {'LOST', at}
  end
  -- 'p' keeps the first lost owner's token (the one that sent): if it was only stalled, its
  -- answer may yet become the record (complete.lua); a later taker never replaces it.
  local lost = v[9] or v[3]
  redis.call('PEXPIRE', key, ttl)
  redis.call('HSET', key, 't', ARGV[2], 'p', lost, 'l', now + lease, 'o', (tonumber(v[8]) or 0) + 1)
  return {'TAKEN', at, lost}
end
return {'DONE', at, state, v[4], v[5] or '', redis.call('PTTL', key)}
