-- rate_limit: one request of a principal against its rate, shared by every gateway (GCRA: the
-- key holds the theoretical arrival time of the next request; Redis's clock is the one clock).
--
-- KEYS[1] the principal's rate key
-- ARGV[1] the record (MessagePack): intervalMs (1000 / requests per second), burst (requests at once)
-- Returns JSON: {"allowed":true} | {"allowed":false,"retryAfterMs":n}
local r = cmsgpack.unpack(ARGV[1])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then
  tat = now
end
local next_tat = tat + r.intervalMs
local allowed_until = now + r.burst * r.intervalMs
if next_tat > allowed_until then
  return cjson.encode({allowed = false, retryAfterMs = math.ceil(next_tat - allowed_until)})
end
redis.call('SET', KEYS[1], string.format('%d', math.ceil(next_tat)), 'PX', math.ceil(next_tat - now) + 1000)
return cjson.encode({allowed = true})
