-- maintain: one worker at a time runs a shard's maintenance. This takes or renews that lease and,
-- for its holder, lists what is due: failed attempts whose backoff has passed, and tasks whose TTL
-- has run out. The holder then runs one per-task script for each (promote_retry, expire_task).
--
-- KEYS[1] the shard's maintenance lease   KEYS[2] retry zset   KEYS[3] expiring zset
-- KEYS[4] the shard's load hash
-- ARGV[1] the record (JSON): worker, now, leaseMs, max
-- Returns JSON: {"held": false} when another worker holds the lease, else {"held": true,
--   "retries": [members], "expired": [task ids], "nextDueMs": ms or null, "setAside": n (nodes set
--   aside in the shard's held lists)}
local r = cjson.decode(ARGV[1])
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= r.worker then
  return cjson.encode({held = false})
end
redis.call('SET', KEYS[1], r.worker, 'PX', r.leaseMs)
local retries = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', r.now, 'LIMIT', 0, r.max)
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', r.now, 'LIMIT', 0, r.max)
local next_due = nil
for _, key in ipairs({KEYS[2], KEYS[3]}) do
  local first = redis.call('ZRANGEBYSCORE', key, '(' .. r.now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then
    local due = tonumber(first[2])
    if not next_due or due < next_due then
      next_due = due
    end
  end
end
local set_aside = tonumber(redis.call('HGET', KEYS[4], 'held') or '0')
local reply = {held = true, retries = retries, expired = expired, nextDueMs = next_due or cjson.null,
  setAside = set_aside}
if #retries == 0 then
  reply.retries = cjson.null
end
if #expired == 0 then
  reply.expired = cjson.null
end
return cjson.encode(reply)
