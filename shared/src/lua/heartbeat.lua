-- heartbeat: a worker says it is alive, in one step: its catalog record, its liveness deadline
-- (Redis's clock plus its lease), and a try at the deployment's maintenance lease. The holder of
-- that lease also learns which workers' deadlines have passed (their entries are to be taken
-- over) and when the next one passes, so that it wakes for a lost worker and at no other time.
--
-- KEYS[1] the workers hash   KEYS[2] the liveness zset   KEYS[3] the maintenance lease
-- ARGV[1] the record (MessagePack): name, record (the worker's record, JSON text, whose heartbeatMs of 0
--   is set here), leaseMs, maintainForMs (how long the maintenance lease lasts unrenewed),
--   lapsedMax (most lapsed workers listed)
-- Returns JSON: {"fresh": bool (the worker was not known: first heartbeat, or Redis lost its
--   data), "maintainer": bool, "nowMs": Redis's clock, and for the maintainer "lapsed": [{name,
--   record (JSON text or "")}] and "nextLapseInMs" (null when no other worker is known)}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
-- The record comes with `"heartbeatMs":0`, set here from Redis's clock; it is not decoded, since
-- cjson would write its empty lists back as objects.
local record = string.gsub(r.record, '"heartbeatMs":0', '"heartbeatMs":' .. string.format('%d', now), 1)
redis.call('HSET', KEYS[1], r.name, record)
local fresh = redis.call('ZADD', KEYS[2], now + r.leaseMs, r.name) == 1
local holder = redis.call('GET', KEYS[3])
if holder and holder ~= r.name then
  return cjson.encode({fresh = fresh, maintainer = false, nowMs = now})
end
redis.call('SET', KEYS[3], r.name, 'PX', r.maintainForMs)
-- The workers whose liveness runs out first, in one read: those past it are lapsed, and the first
-- one still live says when to look next.
local lapsed = {}
local next_lapse = cjson.null
local first = redis.call('ZRANGE', KEYS[2], 0, r.lapsedMax, 'WITHSCORES')
for i = 1, #first, 2 do
  local name, deadline = first[i], tonumber(first[i + 1])
  if name ~= r.name then
    if deadline > now then
      next_lapse = deadline - now
      break
    end
    lapsed[#lapsed + 1] = {name = name, record = redis.call('HGET', KEYS[1], name) or ''}
  end
end
if #lapsed >= r.lapsedMax then
  -- More may have lapsed than one reply lists.
  next_lapse = 0
end
local reply = {fresh = fresh, maintainer = true, nowMs = now, lapsed = lapsed, nextLapseInMs = next_lapse}
if #lapsed == 0 then
  reply.lapsed = cjson.null
end
return cjson.encode(reply)
