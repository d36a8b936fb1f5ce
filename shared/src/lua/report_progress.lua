-- report_progress: record a running node's progress on its task and tell the task's waiters. A
-- node of a graph leaves the task's progress alone (it is the share of settled nodes) and sets only
-- its message.
--
-- KEYS[1] task hash (it holds the nodes)
-- ARGV[1] the record (MessagePack): task, node, attempt, progress, total (or absent), message (or absent)
-- Returns JSON: {"outcome": "recorded" | "refused"} (refused: task over, or a stale attempt)
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local state = redis.call('HMGET', KEYS[1], nf(r.node, 'status'), nf(r.node, 'attempt'), 'status', 'waiters')
if not is_live(state[3]) or state[1] ~= 'running' or tonumber(state[2]) ~= r.attempt then
  return cjson.encode({outcome = 'refused'})
end
local fields = {'updatedAt', now}
local event = {task = r.task, type = 'progress'}
local graph = redis.call('HMGET', KEYS[1], 'kind', 'progress', 'total')
if graph[1] == 'dag' then
  -- A node of a graph: the task's progress stays the weighted share of settled nodes (what
  -- complete_node writes), so that it only grows; the node's message still tells what runs.
  event.progress = tonumber(graph[2] or '0')
  event.total = tonumber(graph[3] or '')
else
  fields[#fields + 1] = 'progress'
  fields[#fields + 1] = r.progress
  event.progress = tonumber(r.progress)
  if r.total ~= nil then
    fields[#fields + 1] = 'total'
    fields[#fields + 1] = r.total
    event.total = tonumber(r.total)
  end
end
if r.message ~= nil then
  fields[#fields + 1] = 'statusMessage'
  fields[#fields + 1] = r.message
  event.message = r.message
end
redis.call('HSET', KEYS[1], unpack(fields))
notify(KEYS[1], cjson.encode(event), state[4] or false)
return cjson.encode({outcome = 'recorded'})
