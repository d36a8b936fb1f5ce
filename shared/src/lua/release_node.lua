-- release_node: a worker that stops (shutdown) hands a running node back to its queue at once,
-- instead of leaving it for its lease to run out: the node is queued again under a new entry and
-- the old entry is acknowledged, in one step.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] the node's work stream
-- ARGV[1] the record (MessagePack): task, node, attempt, trace
-- Returns JSON: {"outcome": "released" | "stale"}
local r = cmsgpack.unpack(ARGV[1])
local n = node_state(KEYS[1], r.node)
if n.status ~= 'running' or n.attempt ~= r.attempt then
  return cjson.encode({outcome = 'stale'})
end
ack(KEYS[3], n.entry)
redis.call('HDEL', KEYS[1], nf(r.node, 'worker'))
-- A handed-back attempt was cut short by its worker's stop: it spends none of the node's retries.
redis.call('HINCRBY', KEYS[1], nf(r.node, 'untried'), 1)
if not is_live(redis.call('HGET', KEYS[1], 'status')) then
  -- The task ended meanwhile: nothing to hand back.
  redis.call('HSET', KEYS[1], nf(r.node, 'status'), 'dropped')
  return cjson.encode({outcome = 'released'})
end
enqueue(KEYS[1], KEYS[3], KEYS[2], r.task, r.node, n.tool, r.trace)
return cjson.encode({outcome = 'released'})
