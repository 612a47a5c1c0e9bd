-- settle: an operator settles a record that cannot be read (a damaged value or hash, a key of
-- another type under its name) as an UNKNOWN outcome, so that it never runs again: retries
-- are answered 502 `outcome-unknown` until its retention ends, or an operator resolves it.
-- KEYS[1]  the name that holds it
-- ARGV[1]  the SHA-1 (hex) of what the operator's tool read there (gateway/store/store.py,
--          `_digest`): a string's value; a hash's fields and values, sorted by name, each
--          followed by a NUL; another type's name
-- ARGV[2]  the UNKNOWN outcome to store (a format-2 value)
-- ARGV[3]  its retention in milliseconds
-- Returns  1 if settled, 0 if the key holds something else now (nothing written)
local kind = redis.call('TYPE', KEYS[1])['ok']
local read
if kind == 'string' then
  read = redis.call('GET', KEYS[1])
elseif kind == 'hash' then
  local all = redis.call('HGETALL', KEYS[1])
  local names = {}
  for i = 1, #all, 2 do
    names[#names + 1] = i
  end
  table.sort(names, function(a, b) return all[a] < all[b] end)
  local parts = {}
  for _, i in ipairs(names) do
    parts[#parts + 1] = all[i] .. '\0' .. all[i + 1] .. '\0'
  end
  read = table.concat(parts)
elseif kind == 'none' then
  return 0
else
  read = kind
end
if redis.sha1hex(read) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])  -- a write Redis allows at maxmemory, after which the rest runs
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
