-- complete_node: settle a running node's attempt. Refuses a stale attempt, so a late or duplicate
-- completion never overwrites a newer one, and never changes a terminal task.
--
-- A failed attempt with retries left is scheduled again (in the delayed set, not in a worker's
-- memory). Otherwise the node settles: a single-call task settles with it; in a DAG its
-- dependents are released (or skipped, by its failure policy), progress moves, and when the last
-- node settles a finalize entry is queued so that a worker assembles the task's result.
--
-- KEYS[1] task hash   KEYS[2] nodes hash   KEYS[3] work stream   KEYS[4] delayed retries zset
-- ARGV[1] node id     ARGV[2] attempt (fencing token)   ARGV[3] now (ms)
-- ARGV[4] outcome: "completed" | "failed" | "cancelled"
-- ARGV[5] payload (JSON): the CallToolResult, or the JSON-RPC error
-- ARGV[6] "1" when the result reports a tool error (isError)
-- ARGV[7] status message of a settled single-call task
-- ARGV[8] events channel   ARGV[9] cancel channel   ARGV[10] task id
-- ARGV[11] jitter in [0, 1) for the retry delay     ARGV[12] longest retry delay (ms)
-- ARGV[13] "1" when the failure is final whatever retries are left (a node that lost its worker
--          too often)
-- KEYS[6] load hash: released dependents join the queued counts; a settled task leaves the
--         owner's live count
-- KEYS[7] expiring set: a settled task is entered with the time its keys expire, so that its
--         owner-index entry is removed then
-- KEYS[5] dead-letter stream: a node whose attempts are spent is recorded there with its last
--         error, the tool and arguments, so that an operator can look and retry.
-- Returns {"stale"}, {"retry", delayMs}, {"dropped"} (task already terminal), {"settled"} (the
-- task settled), {"released", n} (n dependents queued), or {"finalize"} (last node settled).
local node = ARGV[1]
local state = redis.call('HMGET', KEYS[2],
  node .. ':status', node .. ':attempt', node .. ':retries', node .. ':backoffMs',
  node .. ':onFailure', node .. ':weight', node .. ':dependents')
if state[1] ~= 'running' or state[2] ~= ARGV[2] then
  return {'stale'}
end
local now = tonumber(ARGV[3])
local outcome = ARGV[4]
local payload = ARGV[5]
local is_error = ARGV[6] == '1'
local task = redis.call('HMGET', KEYS[1], 'status', 'kind', 'wire', 'ttlMs', 'nodeCount')
local live = task[1] == 'working' or task[1] == 'input_required'
local dag = task[2] == 'dag'
-- In a DAG a tool error is a failed node; a single call reports it as its result.
local failed = outcome == 'failed' or (dag and outcome == 'completed' and is_error)
local attempt = tonumber(state[2])

if live and failed and ARGV[13] ~= '1' and attempt <= tonumber(state[3] or '0') then
  local delay = tonumber(state[4]) * (2 ^ (attempt - 1))
  delay = math.floor(math.min(delay, tonumber(ARGV[12])) * (0.75 + 0.5 * tonumber(ARGV[11])))
  redis.call('HSET', KEYS[2], node .. ':status', 'retry_wait', node .. ':error', payload,
    node .. ':finishedAt', now)
  redis.call('ZADD', KEYS[4], now + delay, ARGV[10] .. ' ' .. node)
  redis.call('HSET', KEYS[1], 'updatedAt', now, 'statusMessage',
    'Node ' .. node .. ' failed (attempt ' .. attempt .. '); retrying in ' .. delay .. ' ms')
  return {'retry', delay}
end

local node_status = 'completed'
if outcome == 'cancelled' then
  node_status = 'cancelled'
elseif failed then
  node_status = 'failed'
end
redis.call('HSET', KEYS[2], node .. ':status', node_status, node .. ':finishedAt', now)
local dead_letter = ''
if failed then
  redis.call('HSET', KEYS[2], node .. ':error', payload)
  local details = redis.call('HMGET', KEYS[2], node .. ':tool', node .. ':args')
  local owner = redis.call('HGET', KEYS[1], 'owner') or ''
  dead_letter = redis.call('XADD', KEYS[5], 'MAXLEN', '~', 100000, '*',
    'task', ARGV[10], 'node', node, 'tool', details[1] or '', 'arguments', details[2] or '{}',
    'owner', owner, 'attempts', attempt, 'error', payload, 'at', now)
end
if node_status == 'completed' or (failed and state[5] == 'continue') then
  redis.call('HSET', KEYS[2], node .. ':output', payload)
end
local settled = redis.call('HINCRBY', KEYS[1], 'nodesSettled', 1)
local weight_settled = redis.call('HINCRBYFLOAT', KEYS[1], 'weightSettled', state[6])
if not live then
  return {'dropped'}
end

local function settle(status, field, value, message)
  redis.call('HSET', KEYS[1], 'status', status, field, value, 'statusMessage', message, 'updatedAt', now)
  local owner = redis.call('HGET', KEYS[1], 'owner') or ''
  redis.call('HINCRBY', KEYS[6], 'live:' .. owner, -1)
  redis.call('ZADD', KEYS[7], now + tonumber(task[4]), owner .. ' ' .. ARGV[10])
  redis.call('PEXPIRE', KEYS[1], task[4])
  redis.call('PEXPIRE', KEYS[2], task[4])
  redis.call('PUBLISH', ARGV[8], cjson.encode({type = 'status', status = status, message = message}))
end

if not dag then
  local status = outcome
  if outcome == 'completed' and is_error and task[3] == '2025-11-25' then
    -- That revision's rule: a tool error fails the task (its result is still kept).
    status = 'failed'
  end
  local field = 'result'
  if outcome ~= 'completed' then
    field = 'error'
  end
  local message = ARGV[7]
  if dead_letter ~= '' then
    message = message .. ' (dead letter ' .. dead_letter .. ')'
  end
  settle(status, field, payload, message)
  return {'settled'}
end

if failed and state[5] == 'fail' then
  local reason = 'node ' .. node .. ' failed after ' .. attempt .. ' attempt(s)'
  local ok, decoded = pcall(cjson.decode, payload)
  if ok and type(decoded) == 'table' and type(decoded.message) == 'string' then
    reason = reason .. ': ' .. decoded.message
  end
  reason = reason .. ' (dead letter ' .. dead_letter .. ')'
  local error = cjson.encode({code = -32603, message = reason, data = {node = node}})
  settle('failed', 'error', error, 'Failed: ' .. reason)
  -- Stop the task's other running nodes on every worker.
  redis.call('PUBLISH', ARGV[9], ARGV[10])
  return {'settled'}
end

local released = 0
local dependents = cjson.decode(state[7] or '[]')
if failed and state[5] == 'skipDependents' then
  local queue = dependents
  local i = 1
  while i <= #queue do
    local d = queue[i]
    i = i + 1
    local fields = redis.call('HMGET', KEYS[2], d .. ':status', d .. ':weight', d .. ':dependents')
    if fields[1] == 'pending' then
      redis.call('HSET', KEYS[2], d .. ':status', 'skipped', d .. ':finishedAt', now)
      settled = redis.call('HINCRBY', KEYS[1], 'nodesSettled', 1)
      weight_settled = redis.call('HINCRBYFLOAT', KEYS[1], 'weightSettled', fields[2])
      for _, next in ipairs(cjson.decode(fields[3] or '[]')) do
        queue[#queue + 1] = next
      end
    end
  end
else
  for _, d in ipairs(dependents) do
    local left = redis.call('HINCRBY', KEYS[2], d .. ':deps', -1)
    if left == 0 and redis.call('HGET', KEYS[2], d .. ':status') == 'pending' then
      redis.call('HSET', KEYS[2], d .. ':status', 'queued')
      redis.call('HINCRBY', KEYS[6], 'queued', 1)
      redis.call('HINCRBY', KEYS[6], 'queued:' .. (redis.call('HGET', KEYS[2], d .. ':tool') or ''), 1)
      redis.call('XADD', KEYS[3], '*', 'task', ARGV[10], 'node', d,
        'traceparent', redis.call('HGET', KEYS[1], 'traceparent') or '')
      released = released + 1
    end
  end
end

local total = redis.call('HGET', KEYS[1], 'weightTotal')
local message = settled .. ' of ' .. task[5] .. ' nodes settled'
redis.call('HSET', KEYS[1], 'progress', weight_settled, 'total', total, 'updatedAt', now, 'statusMessage', message)
redis.call('PUBLISH', ARGV[8], cjson.encode({type = 'progress', progress = tonumber(weight_settled),
  total = tonumber(total), message = message}))
if settled >= tonumber(task[5]) then
  redis.call('XADD', KEYS[3], '*', 'task', ARGV[10], 'node', '$finalize',
    'traceparent', redis.call('HGET', KEYS[1], 'traceparent') or '')
  return {'finalize'}
end
return {'released', released}
