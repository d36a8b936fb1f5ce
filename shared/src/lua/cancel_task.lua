-- cancel_task: move a live task to "cancelled", take its queued nodes out of the load counts, and
-- tell its waiters and every worker of the shard. A terminal task never changes; the caller
-- learns its status instead.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] expiring zset   KEYS[4] kept zset
-- KEYS[5 ..] the task's work streams, in the order of its queues (its queued nodes' entries are
--   deleted: a lean entry would run from its delivery)
-- ARGV[1] the record (MessagePack): task, owner ("" skips the check), message, cancelChannel, token (this
--   request's: a cancel sent again after its reply was lost finds its own token on the task it
--   cancelled, and answers "cancelled" again rather than "terminal"), parkedRound (bool: cancel only
--   a synchronous call that waits in an input round its client was told of, an abandoned round)
-- Returns JSON: {"outcome":"cancelled","settled":"cancelled","tool":the task's tool,"task","trace"}
--   | {"outcome":"terminal","status":s} | {"outcome":"missing"} | {"outcome":"notParked"} (with
--   parkedRound: the call is not waiting in a round any more; nothing changed); with deferEvents
--   (the waiters' events come back with the reply instead of being published), as `reply` beside
--   the `events` (prelude's with_events)
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
if r.deferEvents then
  defer_events()
end
local t = redis.call('HMGET', KEYS[1], 'status', 'owner', 'ttlMs', 'createdAt', 'tool', 'traceparent', 'nodeCount',
  'cancelToken', 'bytes', 'parkedRound', 'mode')
if not t[1] or (r.owner ~= '' and t[2] ~= r.owner) then
  return with_events(cjson.encode({outcome = 'missing'}))
end
if t[1] == 'cancelled' and t[8] == r.token then
  -- This very cancel, sent again: its effects were counted when it first ran.
  return with_events(cjson.encode({outcome = 'cancelled'}))
end
if not is_live(t[1]) then
  return with_events(cjson.encode({outcome = 'terminal', status = t[1]}))
end
if r.parkedRound and not t[10] then
  return with_events(cjson.encode({outcome = 'notParked'}))
end
drop_queued(KEYS[1], KEYS[2], 'cancelled', {unpack(KEYS, 5)}, now)
settle({task = KEYS[1], load = KEYS[2], expiring = KEYS[3], kept = KEYS[4]}, r.task,
  {owner = t[2], createdAt = t[4], ttlMs = t[3], nodeCount = t[7], bytes = t[9], parkedRound = t[10], mode = t[11] or false}, 'cancelled', nil, nil, r.message, now, 0,
  {'cancelToken', r.token})
redis.call('SPUBLISH', r.cancelChannel, r.task)
return with_events(cjson.encode({outcome = 'cancelled', settled = 'cancelled', tool = t[5], task = r.task, trace = t[6]}))
