-- escalate_task: the tool of a synchronous call says that the rest of its work runs as a task
-- (after gathering input through MRTR rounds, say). The hidden task becomes the client's task:
-- it is listed for its owner (create indexed it already), and the waiting gateway answers the
-- call with the task instead of the result. Only a call created as escalable changes.
--
-- KEYS[1] task hash (it holds the nodes)
-- ARGV[1] the record (MessagePack): task, node, attempt, message
-- Returns JSON: {"outcome": "escalated" | "unchanged" (not an escalable synchronous call, or over)
--   | "stale"}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local n = node_state(KEYS[1], r.node, {'status', 'mode', 'escalable', 'waiters'})
if n.status ~= 'running' or n.attempt ~= r.attempt then
  return cjson.encode({outcome = 'stale'})
end
local t = n.task
if t.mode ~= 'sync' or t.escalable ~= '1' or not is_live(t.status) then
  return cjson.encode({outcome = 'unchanged'})
end
redis.call('HSET', KEYS[1], 'mode', 'task', 'updatedAt', now, 'statusMessage', r.message)
redis.call('HDEL', KEYS[1], 'escalable')
notify(KEYS[1], '{"task":' .. cjson.encode(r.task) .. ',"type":"status","status":"' .. t.status ..
  '","message":' .. cjson.encode(r.message) .. ',"escalated":true}', t.waiters)
return cjson.encode({outcome = 'escalated'})
