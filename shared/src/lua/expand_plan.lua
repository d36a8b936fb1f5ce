-- expand_plan: a running tool planned its work as a graph. Its node completes, the task becomes a
-- DAG task, and the planned nodes join it; those that depend on nothing are queued at once. Only
-- the node of a direct tool call (a single-call task) may plan. The planning node's entry is
-- acknowledged when the plan is taken.
--
-- The planned nodes are held and queued like a created graph's: against the shares of the load
-- limits the call was admitted under (its `planLimits`, stored at creation): the nodes its owner's
-- live tasks hold here (nodes_per_principal), the shard's queued nodes (queued_nodes) and each
-- tool's (queued_nodes_per_tool). A plan that would pass one is refused with the limit's name. (The
-- graph limits stored there, max_dag_nodes and max_dag_node_bytes, the store checks before.)
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
  'progress', 'keptMax', 'planLimits')
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
do
  local shares = {}
  for v in string.gmatch(t[10] or '', '%-?%d+') do
    shares[#shares + 1] = tonumber(v)
  end
  local nodes_share, queued_share, tool_share = shares[3] or -1, shares[4] or -1, shares[5] or -1
  local owner = t[5] or ''
  local roots, roots_by_tool = root_counts(r.nodes)
  local load = redis.call('HMGET', KEYS[2], 'live:' .. owner, 'nodes:' .. owner, 'queued')
  -- The owner's live tasks hold one node each (this one's planner among them) and `nodes:` more.
  local held = tonumber(load[1] or '0') + tonumber(load[2] or '0')
  local queued = tonumber(load[3] or '0')
  if nodes_share >= 0 and held + #r.nodes > nodes_share then
    return cjson.encode({outcome = 'refused', reason = 'the planned graph has ' .. #r.nodes .. ' nodes, more than ' ..
      'its principal\'s unfinished tasks may hold (nodes_per_principal: ' .. held .. ' held where this task ' ..
      'lives, whose share of the limit is ' .. nodes_share .. ')'})
  end
  if queued_share >= 0 and queued + roots > queued_share then
    return cjson.encode({outcome = 'refused', reason = 'the planned graph would queue ' .. roots .. ' nodes, ' ..
      'more than the queues take now (queued_nodes: ' .. queued .. ' queued where this task lives, whose share ' ..
      'of the limit is ' .. queued_share .. '); call again later'})
  end
  if tool_share >= 0 then
    for tool, count in pairs(roots_by_tool) do
      local current = tonumber(redis.call('HGET', KEYS[2], 'queued:' .. tool) or '0')
      if string.sub(tool, 1, 1) ~= '$' and current + count > tool_share then
        return cjson.encode({outcome = 'refused', reason = 'the planned graph would queue ' .. count .. ' nodes ' ..
          'of ' .. tool .. ', more than its queue takes now (queued_nodes_per_tool: ' .. current .. ' queued ' ..
          'where this task lives, whose share of the limit is ' .. tool_share .. '); call again later'})
      end
    end
  end
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
