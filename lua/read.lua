-- read: a record as operators see it, under whichever of its names holds it.
-- KEYS[1]  the record's name in one format
-- KEYS[2]  its name in the other (the same Cluster slot; may repeat KEYS[1])
-- Returns  {at, "hash", fields, pttl_ms}   fields: the hash's names and values, in turn
--          {at, "string", value, pttl_ms}  a format-2 record
--          {at, type, {}, pttl_ms}         anything else (not a record)
--          {0}                             neither name holds anything
--          `at` is 1 or 2: the KEYS entry that holds it.
for at, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then
    return {at, kind, redis.call('HGETALL', key), redis.call('PTTL', key)}
  elseif kind == 'string' then
    return {at, kind, redis.call('GET', key), redis.call('PTTL', key)}
  elseif kind ~= 'none' then
    return {at, kind, {}, redis.call('PTTL', key)}
  end
end
return {0}
