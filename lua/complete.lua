-- complete: store the outcome of an upstream call, unless a newer claim holds the key (fencing).
-- KEYS[1]  the record's key (the name its claim is held under)
-- ARGV[1]  owner token
-- ARGV[2]  state to store: "C" (completed) or "U" (unknown outcome)
-- ARGV[3]  format 1: the encoded record metadata (status, headers, body size, digest, blob
--          pointer); format 2: the whole record (gateway/core/compact.py), an unknown outcome
--          of a taken-over key with its lost owner's token in it
-- ARGV[4]  format 1: the inline body bytes ("" when the body lives in the blob store)
-- ARGV[5]  retention in milliseconds
-- ARGV[6]  the request's fingerprint (kept, so that retries are still compared against it)
-- ARGV[7]  "2": write format 2 (a string); else format 1 (a hash)
-- ARGV[8]  the outcome's identity (gateway/core/layout.py), in either format: a settled
--          string that holds the same one is this call's own, repeated
-- Returns  1 if stored: the token owns the PENDING key, or the key is gone (the lease and its
--            hold ended and nobody claimed since: a stalled owner's outcome is kept, never
--            run again); also for a repeated call of the same outcome (the same token on a
--            hash, the same identity on a string), which renews the retention (a write, so
--            that a WAIT after the repeat also covers the first call); also for an owner
--            thought lost ('p', claim.lua) whose key is still unsettled (PENDING under a
--            taker) or holds the UNKNOWN outcome recorded meanwhile: the answer that really
--            came becomes the record, and the taker is fenced
--          0 if another token holds the key (a newer claim, or its outcome): nothing written
-- The PEXPIRE comes first: it is a write that Redis allows at maxmemory, and after a script's
-- first write Redis lets the rest run too, so an outcome that already ran upstream is stored
-- even on a full `noeviction` Redis, where new claims are refused.
--[[ settled: gateway/core/layout.py ]]
local key = KEYS[1]
local kind = redis.call('TYPE', key)['ok']
local compact = ARGV[7] == '2'
local state, owner, lost, same
if kind == 'hash' then
  local v = redis.call('HMGET', key, 's', 't', 'p')
  state, owner, lost = v[1], v[2], v[3]
elseif kind == 'string' then
  local identity, _
  state, _, lost, identity = settled(redis.call('GET', key))
  if not state then
    return 0  -- not a record this script can read: never overwritten
  end
  -- A settled string keeps no owner token: the same outcome (its identity: state,
  -- fingerprint and time) stored again is its owner's repeat, however it was written.
  same = identity ~= '' and identity == ARGV[8]
elseif kind ~= 'none' then
  return 0
end

-- Format 2: the record as given. A key that is there has its TTL set first.
local function store()
  if kind ~= 'none' then
    redis.call('PEXPIRE', key, ARGV[5])
  end
  redis.call('SET', key, ARGV[3], 'PX', ARGV[5])
end

if not state then
  if compact then
    store()
  else
    redis.call('HSET', key, 's', ARGV[2], 't', ARGV[1], 'f', ARGV[6], 'm', ARGV[3], 'b', ARGV[4])
    redis.call('PEXPIRE', key, ARGV[5])
  end
  return 1
end
if same or (owner == ARGV[1] and state ~= 'P') then
  redis.call('PEXPIRE', key, ARGV[5])
  return 1
end
if owner ~= ARGV[1] then
  if lost == ARGV[1] and (state == 'U' or state == 'P') then
    if compact then
      store()
    elseif kind == 'string' then  -- an unknown outcome of format 2 replaced by a hash
      redis.call('DEL', key)  -- a write Redis allows at maxmemory, as PEXPIRE
      redis.call('HSET', key, 's', ARGV[2], 't', ARGV[1], 'f', ARGV[6], 'm', ARGV[3], 'b', ARGV[4])
      redis.call('PEXPIRE', key, ARGV[5])
    else
      redis.call('PEXPIRE', key, ARGV[5])
      redis.call('HSET', key, 's', ARGV[2], 't', ARGV[1], 'm', ARGV[3], 'b', ARGV[4])
      redis.call('HDEL', key, 'p')
    end
    return 1
  end
  return 0
end
-- PENDING under this token: settled now.
if compact then
  store()
  return 1
end
redis.call('PEXPIRE', key, ARGV[5])
redis.call('HSET', key, 's', ARGV[2], 'm', ARGV[3], 'b', ARGV[4])
redis.call('HDEL', key, 'l')
return 1
