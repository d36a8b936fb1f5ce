-- expand_plan: a running tool planned its work as a graph. Its node completes, the task becomes a
-- DAG task, and the planned nodes join it; those that depend on nothing are queued at once.
-- Only the node of a direct tool call (a single-call task) may plan.
--
-- KEYS[1] task hash   KEYS[2] nodes hash   KEYS[3] work stream   KEYS[4] load hash
-- ARGV[1] planning node id   ARGV[2] attempt (fencing token)   ARGV[3] now (ms)
-- ARGV[4] the planning node's output (JSON)   ARGV[5] output node of the plan ("" for none)
-- ARGV[6] planned nodes (JSON array, the shape create_task.lua reads)   ARGV[7] task id
-- ARGV[8] events channel
-- Returns {"expanded", n}, {"stale"}, {"dropped"} (task no longer live), {"refused", reason}.
local node = ARGV[1]
local state = redis.call('HMGET', KEYS[2], node .. ':status', node .. ':attempt', node .. ':weight')
if state[1] ~= 'running' or state[2] ~= ARGV[2] then
  return {'stale'}
end
local task = redis.call('HMGET', KEYS[1], 'status', 'kind', 'traceparent')
if task[1] ~= 'working' then
  return {'dropped'}
end
if task[2] ~= 'single' then
  return {'refused', 'only a direct tool call may plan a graph'}
end
local nodes = cjson.decode(ARGV[6])
for _, n in ipairs(nodes) do
  if redis.call('HEXISTS', KEYS[2], n.id .. ':status') == 1 then
    return {'refused', 'planned node id ' .. n.id .. ' is already taken'}
  end
end
local now = ARGV[3]
redis.call('HSET', KEYS[2], node .. ':status', 'completed', node .. ':finishedAt', now, node .. ':output', ARGV[4])
local weight_total = tonumber(state[3])
for _, n in ipairs(nodes) do
  weight_total = weight_total + n.weight
  local status = 'pending'
  if n.deps == 0 then
    status = 'queued'
  end
  redis.call('HSET', KEYS[2],
    n.id .. ':status', status,
    n.id .. ':attempt', 0,
    n.id .. ':tool', n.tool,
    n.id .. ':args', n.args,
    n.id .. ':deps', n.deps,
    n.id .. ':dependents', cjson.encode(n.dependents),
    n.id .. ':retries', n.retries,
    n.id .. ':backoffMs', n.backoffMs,
    n.id .. ':timeoutMs', n.timeoutMs,
    n.id .. ':onFailure', n.onFailure,
    n.id .. ':weight', n.weight)
  if n.deps == 0 then
    redis.call('HINCRBY', KEYS[4], 'queued', 1)
    redis.call('HINCRBY', KEYS[4], 'queued:' .. n.tool, 1)
    redis.call('XADD', KEYS[3], '*', 'task', ARGV[7], 'node', n.id, 'traceparent', task[3] or '')
  end
end
local message = 'Planned ' .. #nodes .. ' nodes'
redis.call('HSET', KEYS[1],
  'kind', 'dag',
  'outputNode', ARGV[5],
  'nodeCount', 1 + #nodes,
  'nodesSettled', 1,
  'weightTotal', weight_total,
  'weightSettled', state[3],
  'progress', state[3],
  'total', weight_total,
  'statusMessage', message,
  'updatedAt', now)
redis.call('PUBLISH', ARGV[8], cjson.encode({type = 'progress', progress = tonumber(state[3]),
  total = weight_total, message = message}))
return {'expanded', #nodes}
