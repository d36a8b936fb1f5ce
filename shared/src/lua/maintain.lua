-- maintain: the maintenance holder looks at one shard: what is due now (failed attempts whose
-- backoff has passed, tasks whose TTL has run out), and when the next item falls due. That time
-- is kept as the shard's planned look (`wake` in its load hash), so that a script that schedules
-- something sooner wakes the holder (wake_maintenance) and nothing else does: an idle shard costs
-- no look at all. The holder then runs one per-task script for each item (promote_retry,
-- expire_task). Settled tasks whose keys have expired give their owners' bytes back here, since
-- their index entries say how many (shard's kept zset).
--
-- While the shard has live tasks, their entries may be left unrenewed by a worker that failed to
-- run them, so the holder also looks for idle entries (idle_entries) at least every `idleEveryMs`:
-- the next look is planned no further off. That period is kept in the load hash (`idleEvery`), so
-- that the first task created in a quiet shard wakes the holder within it (create_task).
--
-- KEYS[1] retry zset   KEYS[2] expiring zset   KEYS[3] the shard's load hash   KEYS[4] kept zset
-- ARGV[1] the record (MessagePack): max, everyMs (when set-aside nodes wait, the next look is at most
--   this far off), idleEveryMs (while the shard has live tasks, the next look is at most this far
--   off; 0: no bound)
-- Returns JSON: {"retries": [members], "expired": [task ids], "nextDueInMs": ms or null,
--   "setAside": n (nodes set aside in the shard's held lists), "freed": n (settled tasks whose bytes
--   went back to their owners), "live": bool (the shard has live tasks)}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local retries = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, r.max)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, r.max)
local freed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, r.max)
if #freed > 0 then
  -- A bucket of an owner's settled tasks (prelude's keep_until) gives back what its tasks kept.
  local fields = {}
  for i, member in ipairs(freed) do
    fields[i] = 'keptAt:' .. member
  end
  local held = redis.call('HMGET', KEYS[3], unpack(fields))
  for i, member in ipairs(freed) do
    if held[i] then
      local owner = string.match(member, '^[^\t]*\t(.*)$')
      give_back(KEYS[3], owner, tonumber(held[i]) or 0)
    else
      -- One task's member, as a previous version wrote it: `<taskId>\t<bytes>\t<owner>`.
      local bytes, owner = string.match(member, '^[^\t]*\t(%d+)\t(.*)$')
      if bytes then
        give_back(KEYS[3], owner, tonumber(bytes))
      end
    end
  end
  redis.call('HDEL', KEYS[3], unpack(fields))
  redis.call('ZREM', KEYS[4], unpack(freed))
end
local next_due = nil
if #retries == r.max or #expired == r.max or #freed == r.max then
  -- More is due than one look takes.
  next_due = now
else
  for _, key in ipairs({KEYS[1], KEYS[2], KEYS[4]}) do
    local first = redis.call('ZRANGEBYSCORE', key, '(' .. now, '(' .. INDEX_PIN_SCORE, 'WITHSCORES', 'LIMIT', 0, 1)
    if first[2] then
      local due = tonumber(first[2])
      if not next_due or due < next_due then
        next_due = due
      end
    end
  end
end
local load = redis.call('HMGET', KEYS[3], 'held', 'idleEvery')
local set_aside = tonumber(load[1] or '0')
if set_aside > 0 and (not next_due or next_due > now + r.everyMs) then
  next_due = now + r.everyMs
end
local idle_every = r.idleEveryMs or 0
local live = redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. INDEX_PIN_SCORE) > 0
if live and idle_every > 0 and (not next_due or next_due > now + idle_every) then
  next_due = now + idle_every
end
if tonumber(load[2] or '0') ~= idle_every then
  redis.call('HSET', KEYS[3], 'idleEvery', idle_every)
end
if next_due then
  redis.call('HSET', KEYS[3], 'wake', next_due)
else
  redis.call('HDEL', KEYS[3], 'wake')
end
local reply = {retries = retries, expired = expired, setAside = set_aside, freed = #freed,
  nextDueInMs = cjson.null, live = live}
if next_due then
  reply.nextDueInMs = next_due - now
end
if #retries == 0 then
  reply.retries = cjson.null
end
if #expired == 0 then
  reply.expired = cjson.null
end
return cjson.encode(reply)
