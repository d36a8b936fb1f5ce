-- expand_plan: a running tool planned its work as a graph. Its node completes, the task becomes a
-- DAG task, and the planned nodes join it; those that depend on nothing are queued at once. Only
-- the node of a direct tool call (a single-call task) may plan. The planning node's entry is
-- acknowledged when the plan is taken.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash
-- KEYS[3 ..] the work stream of each queue in record.queues (the task's queues, then new ones)
-- ARGV[1] the record (MessagePack): task, node, attempt, output (JSON text), planOutput, nodes (as
--   create_task reads them, with q indexing record.queues), queues
-- Returns JSON: {"outcome": "expanded" (with count) | "stale" | "dropped" | "refused" (with reason)}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local node = r.node
local n = node_state(KEYS[1], node)
if n.status ~= 'running' or n.attempt ~= r.attempt then
  return cjson.encode({outcome = 'stale'})
end
local t = redis.call('HMGET', KEYS[1], 'status', 'kind', 'traceparent', 'queues', 'owner', 'maxBytes', 'bytes',
  'progress', 'keptMax')
if t[1] ~= 'working' then
  return cjson.encode({outcome = 'dropped'})
end
if t[2] == 'dag' then
  return cjson.encode({outcome = 'refused', reason = 'only a direct tool call may plan a graph'})
end
for _, p in ipairs(r.nodes) do
  if redis.call('HEXISTS', KEYS[1], nf(p.id, 'status')) == 1 then
    return cjson.encode({outcome = 'refused', reason = 'planned node id ' .. p.id .. ' is already taken'})
  end
end
local planned_bytes = #r.output
for _, p in ipairs(r.nodes) do
  planned_bytes = planned_bytes + #p.args
end
local fits, used, budget = fits_budget({maxBytes = t[6], bytes = t[7]}, planned_bytes)
if not fits then
  return cjson.encode({outcome = 'refused', reason = 'the planned graph takes ' .. planned_bytes ..
    ' bytes, which passes the task\'s budget of ' .. budget .. ' bytes (max_task_bytes)'})
end
local room, held, share = kept_room(KEYS[2], t[5] or '', planned_bytes, t[9])
if not room then
  mark_full(KEYS[2], t[5] or '')
  return cjson.encode({outcome = 'refused', reason = 'the planned graph takes ' .. planned_bytes ..
    ' bytes, which passes what its principal may keep in Redis (stored_bytes_per_principal: ' .. held ..
    ' bytes kept where this task lives, whose share of the budget is ' .. share .. ')'})
end
-- The plan's bytes are the owner's; the task's `bytes` is written below with its other fields.
store_bytes(nil, KEYS[2], t[5] or '', planned_bytes)
local streams = {}
for i = 1, #r.queues do
  streams[i] = KEYS[2 + i]
end
ack(streams[n.q], n.entry)
redis.call('HSET', KEYS[1], nf(node, 'status'), 'completed', nf(node, 'finishedAt'), now,
  nf(node, 'output'), r.output)
local keys = {task = KEYS[1], load = KEYS[2]}
local weight_total = tonumber(n.weight)
for _, p in ipairs(r.nodes) do
  weight_total = weight_total + tonumber(p.weight)
  write_node(keys, streams, r.task, p, t[3])
end
local message = 'Planned ' .. #r.nodes .. ' nodes'
-- The planned nodes join what the owner's live tasks hold.
hold_nodes(KEYS[2], t[5] or '', #r.nodes)
-- The graph's progress counts on from what the planner reported (its base), so that it never goes
-- back: the planner's weight is settled, the planned nodes' weights are still to come.
local base = tonumber(t[8] or '0') or 0
redis.call('HSET', KEYS[1], 'bytes', used, 'kind', 'dag', 'outputNode', r.planOutput, 'nodeCount', 1 + #r.nodes,
  'nodesSettled', 1, 'weightTotal', weight_total, 'weightSettled', n.weight, 'progressBase', base,
  'progress', base + n.weight, 'total', base + weight_total, 'statusMessage', message, 'updatedAt', now,
  'queues', cjson.encode(r.queues))
notify(KEYS[1], cjson.encode({task = r.task, type = 'progress', progress = base + tonumber(n.weight),
  total = base + weight_total, message = message}))
return cjson.encode({outcome = 'expanded', count = #r.nodes})
