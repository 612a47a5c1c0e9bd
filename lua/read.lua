-- read: a record as operators see it, under whichever of its names holds it.
-- KEYS[1]  the record's name in one format
-- KEYS[2]  its name in the other (the same Cluster slot; may repeat KEYS[1])
-- Returns  {"FOUND", at, type, payload, pttl}  `type` "hash": `payload` the hash's names and
--                                              values, in turn; "string": a format-2 record;
--                                              anything else (not a record): {}
--          {"ABSENT", at}                      neither name holds anything (`at` 0)
--          `at` is 1 or 2: the KEYS entry that holds it (gateway/store/replies.py).
for at, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then
    return {'FOUND', at, kind, redis.call('HGETALL', key), redis.call('PTTL', key)}
  elseif kind == 'string' then
    return {'FOUND', at, kind, redis.call('GET', key), redis.call('PTTL', key)}
  elseif kind ~= 'none' then
    return {'FOUND', at, kind, {}, redis.call('PTTL', key)}
  end
end
return {'ABSENT', 0}
