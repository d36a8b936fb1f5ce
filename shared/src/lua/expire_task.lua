-- expire_task: a task's TTL, counted from its creation, has run out while it was unsettled. It gives
-- back its load (its owner's live count, or its input round when it was parked in one its client
-- was told of; its queued nodes; the bytes it stores), its running nodes are told to stop, and its
-- waiters hear that it is gone. Its keys are deleted and it leaves its owner's index. A task that
-- settled meanwhile is left to its keys' own expiry.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] expiring zset
-- KEYS[4] the owner's task index   KEYS[5 ..] the task's work streams, in the order of its queues
--   (its queued nodes' entries are deleted: a lean entry would run from its delivery)
-- ARGV[1] the record (MessagePack): task, cancelChannel
-- Returns JSON: {"outcome": "expired" (with settled: "expired", tool, task, trace) | "notYet"
--   | "gone" (no such task, or it settled)}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local t = redis.call('HMGET', KEYS[1], 'status', 'owner', 'createdAt', 'ttlMs', 'tool', 'traceparent', 'nodeCount',
  'bytes', 'parkedRound')
if not t[1] then
  redis.call('ZREM', KEYS[3], r.task)
  redis.call('ZREM', KEYS[4], r.task)
  return cjson.encode({outcome = 'gone'})
end
local expires = tonumber(t[3]) + tonumber(t[4])
if expires > now then
  redis.call('ZADD', KEYS[3], expires, r.task)
  return cjson.encode({outcome = 'notYet'})
end
if not is_live(t[1]) then
  -- It settled after this expiry was found due: its keys expire by themselves, a grace after it
  -- settled (`settle`), so that its waiters can read what they were told of.
  redis.call('ZREM', KEYS[3], r.task)
  return cjson.encode({outcome = 'gone'})
end
-- A call parked in an input round its client was told of held a round, not a live slot.
if t[9] then
  count_down(KEYS[2], 'rounds:' .. t[2], 1)
else
  count_down(KEYS[2], 'live:' .. t[2], 1)
end
hold_nodes(KEYS[2], t[2], 1 - (tonumber(t[7]) or 1))
drop_queued(KEYS[1], KEYS[2], nil, {unpack(KEYS, 5)})
-- A settled task gives its bytes back through the kept index; an unsettled one does here.
store_bytes(nil, KEYS[2], t[2], -(tonumber(t[8] or '0') or 0))
notify(KEYS[1], cjson.encode({task = r.task, type = 'expired'}))
redis.call('SPUBLISH', r.cancelChannel, r.task)
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], r.task)
redis.call('ZREM', KEYS[4], r.task)
return cjson.encode({outcome = 'expired', settled = 'expired', tool = t[5], task = r.task, trace = t[6]})
