-- wrk script for the idempotency scenarios; set by environment variables:
--   MODE     unique (a new key every request), fixed (KEYS keys, replayed),
--            seed (PER_KEY requests per key), burst (PER_KEY requests per key, shared by
--            all threads at once), get (GET /get, no key)
--   RUN      a prefix making this run's keys unique
--   KEYS, PER_KEY  as above
-- done() prints one JSON line (prefixed "RESULT ") with latency percentiles in microseconds
-- and the exact count of every status code (wrk's own "Non-2xx" lumps them together).
local mode = os.getenv("MODE") or "unique"
local run = os.getenv("RUN") or "r"
local nkeys = tonumber(os.getenv("KEYS") or "1000")
local per_key = tonumber(os.getenv("PER_KEY") or "10")
local body = '{"amount":100,"currency":"EUR"}'
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  n = 0
  codes = {}
  keys_sent = 0
end

function request()
  n = n + 1
  if mode == "get" then
    return wrk.format("GET", "/get", {}, nil)
  end
  local key
  if mode == "unique" then
    key = run .. "-" .. id .. "-" .. n
    keys_sent = keys_sent + 1
  elseif mode == "fixed" then
    key = run .. "-k" .. ((n * 7 + id * 7919) % nkeys)
  elseif mode == "seed" then
    key = run .. "-" .. id .. "-" .. math.floor((n - 1) / per_key)
    if (n - 1) % per_key == 0 then keys_sent = keys_sent + 1 end
  else -- burst: every thread's n-th group shares one key
    key = run .. "-b" .. math.floor((n - 1) / per_key)
    if id == 0 and (n - 1) % per_key == 0 then keys_sent = keys_sent + 1 end
  end
  return wrk.format("POST", "/pay", {["Idempotency-Key"] = key,
    ["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end

function done(summary, latency, requests)
  local all = {}
  local sent = 0
  for _, thread in ipairs(threads) do
    for code, count in pairs(thread:get("codes")) do
      all[code] = (all[code] or 0) + count
    end
    sent = sent + thread:get("keys_sent")
  end
  local parts = {}
  for code, count in pairs(all) do
    table.insert(parts, string.format('"%d":%d', code, count))
  end
  local pct = {}
  for _, p in ipairs({1, 5, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}) do
    table.insert(pct, string.format('[%g,%d]', p, latency:percentile(p)))
  end
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests":%d,"duration_us":%d,"codes":{%s},"percentiles":[%s],' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"keys_sent":%d}\n',
    summary.requests, summary.duration, table.concat(parts, ","), table.concat(pct, ","),
    e.connect, e.read, e.write, e.timeout, sent))
end
