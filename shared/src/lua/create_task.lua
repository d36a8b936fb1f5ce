-- create_task: write a new task and its nodes, index it under its owner, and enqueue the nodes
-- that depend on nothing. Runs before the client gets its create result, so tasks/get on the
-- returned id always resolves.
--
-- KEYS[1] task hash          cv:{id}:task
-- KEYS[2] nodes hash         cv:{id}:nodes
-- KEYS[3] owner index zset   cv:owner:<owner>:tasks
-- KEYS[4] work stream        cv:work
-- ARGV[1]  task id            ARGV[2]  now (ms)          ARGV[3]  owner
-- ARGV[4]  tool called        ARGV[5]  arguments (JSON)  ARGV[6]  ttl (ms)
-- ARGV[7]  poll interval (ms) ARGV[8]  wire protocol     ARGV[9]  progress token (JSON, or "")
-- ARGV[10] traceparent        ARGV[11] mode ("task" | "sync")
-- ARGV[12] index under owner ("1" | "0")                 ARGV[13] initial status message
-- ARGV[14] owner index retention (ms): entries older than now minus this are trimmed
-- ARGV[15] kind: "single" (one tool call, its result is the task's) | "dag"
-- ARGV[16] output node of a DAG ("" for none)
-- ARGV[17] nodes: JSON array of {id, tool, args (a JSON string), deps (count), dependents (ids),
--          retries, backoffMs, timeoutMs (0 for none), onFailure, weight}
-- KEYS[5] idempotency key of this call, or the empty string when the call carries none
-- ARGV[18] the call's fingerprint (tool and arguments), kept under the idempotency key
-- ARGV[19] how long the idempotency key is kept (ms)
-- KEYS[6] load hash: queued nodes ("queued", "queued:<tool>") and live tasks ("live:<owner>")
-- ARGV[20] most queued nodes overall, ARGV[21] most queued nodes per tool, ARGV[22] most live
--          tasks per owner (0: no limit). Over a limit nothing is written and the reply is
--          {"limit", which, current, limit, tool}.
-- Returns {"created"}; {"exists"} when a task with this id already exists (nothing is written);
-- {"duplicate", taskId} when the idempotency key names an earlier task of the same call (nothing
-- is written); {"conflict", taskId} when it names an earlier task of a different call.
if KEYS[5] ~= '' then
  local earlier = redis.call('GET', KEYS[5])
  if earlier then
    local task_id, fingerprint = string.match(earlier, '^(%S+) (.*)$')
    if fingerprint == ARGV[18] then
      return {'duplicate', task_id}
    end
    return {'conflict', task_id}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists'}
end
local now = ARGV[2]
local nodes = cjson.decode(ARGV[17])
local function load(field)
  return tonumber(redis.call('HGET', KEYS[6], field) or '0')
end
local roots, roots_by_tool = 0, {}
for _, n in ipairs(nodes) do
  if n.deps == 0 then
    roots = roots + 1
    roots_by_tool[n.tool] = (roots_by_tool[n.tool] or 0) + 1
  end
end
local max_live, max_queued, max_per_tool = tonumber(ARGV[22]), tonumber(ARGV[20]), tonumber(ARGV[21])
if max_live > 0 and load('live:' .. ARGV[3]) + 1 > max_live then
  return {'limit', 'live_tasks_per_principal', tostring(load('live:' .. ARGV[3])), ARGV[22], ''}
end
if max_queued > 0 and load('queued') + roots > max_queued then
  return {'limit', 'queued_nodes', tostring(load('queued')), ARGV[20], ''}
end
if max_per_tool > 0 then
  for tool, count in pairs(roots_by_tool) do
    if string.sub(tool, 1, 1) ~= '$' and load('queued:' .. tool) + count > max_per_tool then
      return {'limit', 'queued_nodes_per_tool', tostring(load('queued:' .. tool)), ARGV[21], tool}
    end
  end
end
redis.call('HINCRBY', KEYS[6], 'live:' .. ARGV[3], 1)
redis.call('HINCRBY', KEYS[6], 'queued', roots)
for tool, count in pairs(roots_by_tool) do
  redis.call('HINCRBY', KEYS[6], 'queued:' .. tool, count)
end
local weight_total = 0
for _, n in ipairs(nodes) do
  weight_total = weight_total + n.weight
end
redis.call('HSET', KEYS[1],
  'status', 'working',
  'statusMessage', ARGV[13],
  'createdAt', now,
  'updatedAt', now,
  'ttlMs', ARGV[6],
  'pollMs', ARGV[7],
  'owner', ARGV[3],
  'tool', ARGV[4],
  'arguments', ARGV[5],
  'wire', ARGV[8],
  'progressToken', ARGV[9],
  'traceparent', ARGV[10],
  'mode', ARGV[11],
  'kind', ARGV[15],
  'outputNode', ARGV[16],
  'nodeCount', #nodes,
  'nodesSettled', 0,
  'weightTotal', weight_total,
  'weightSettled', 0)
for _, n in ipairs(nodes) do
  local id = n.id
  local status = 'pending'
  if n.deps == 0 then
    status = 'queued'
  end
  redis.call('HSET', KEYS[2],
    id .. ':status', status,
    id .. ':attempt', 0,
    id .. ':tool', n.tool,
    id .. ':args', n.args,
    id .. ':deps', n.deps,
    id .. ':dependents', cjson.encode(n.dependents),
    id .. ':retries', n.retries,
    id .. ':backoffMs', n.backoffMs,
    id .. ':timeoutMs', n.timeoutMs,
    id .. ':onFailure', n.onFailure,
    id .. ':weight', n.weight)
  if n.deps == 0 then
    redis.call('XADD', KEYS[4], '*', 'task', ARGV[1], 'node', id, 'traceparent', ARGV[10])
  end
end
if ARGV[12] == '1' then
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (tonumber(now) - tonumber(ARGV[14])))
  redis.call('PEXPIRE', KEYS[3], ARGV[14])
end
if KEYS[5] ~= '' then
  redis.call('SET', KEYS[5], ARGV[1] .. ' ' .. ARGV[18], 'PX', ARGV[19])
end
return {'created'}
