-- dictionary: keep a route's trained dictionary for as long as the records that name it, and
-- put it back where it is gone (evicted, deleted, lost in a failover or with a restart) or
-- damaged.
-- KEYS[1]  the dictionary's key (gateway/store/trained.py)
-- ARGV[1]  its checksum: bytes 8 to 11 of the stored value (the CRC-32 of its data)
-- ARGV[2]  how long it must be kept from now, in milliseconds
-- ARGV[3]  the whole stored value
-- Returns  {"KEPT"}      there as given: kept at least ARGV[2] from now
--          {"PUT_BACK"}  it was gone, or damaged (its checksum its own, its bytes not): stored
--                        again
--          {"OTHER"}     another dictionary holds the key: left as it is
-- Reading it here, and the PEXPIRE, count as uses: an evicting Redis takes it last.
local value = redis.call('GET', KEYS[1])
if value and value ~= ARGV[3] and string.sub(value, 8, 11) ~= ARGV[1] then
  return {'OTHER'}
end
if value ~= ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
  return {'PUT_BACK'}
end
-- A write every time, never shortening what another gateway asked for: a WAIT after it counts
-- the replicas that hold the dictionary.
redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2])))
return {'KEPT'}
