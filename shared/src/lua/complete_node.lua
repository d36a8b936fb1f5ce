-- complete_node: settle a batch of running nodes' attempts of one shard, in order, each as if
-- alone: settle the attempt, acknowledge its work entry, and tell the task's waiters. A stale
-- attempt (the node was retried, taken over or settled meanwhile) is refused and changes nothing,
-- so a late or duplicate completion never overwrites a newer one. A worker sends the completions
-- that finished while its previous batch of that shard was on the way, so that a busy shard costs
-- one script call per batch, not per node, and an idle one waits for nothing.
--
-- A failed attempt with retries left waits out its backoff in the shard's retry set. Otherwise
-- the node settles: a single-call task settles with it; in a DAG its dependents are released (or
-- skipped, by its failure policy), progress moves, and when the last node settles a finalize entry
-- is queued on the built-in queue so that a worker assembles the task's result.
--
-- KEYS[1] load hash   KEYS[2] retry zset   KEYS[3] expiring zset   KEYS[4] dead-letter stream
-- KEYS[5] kept zset (settled tasks whose bytes their owners keep)
-- then for each completion, from its `k`: its task hash (it holds the nodes), the work stream of
-- each of the task's Q queues in the order of the task's `queues`, then the held list of each
-- (start_nodes)
-- ARGV[1] the batch (MessagePack): an array of records, each: k (the index in KEYS of its first
--   key), task, node, attempt, outcome ("completed" | "failed" |
--   "cancelled"), payload (JSON text: the CallToolResult or the JSON-RPC error), isError, message
--   (status message of a settled single-call task), jitter in [0, 1), maxBackoffMs, final (bool:
--   no retry whatever is left), deadLetter (bool: a failure that settles the node is recorded in
--   the dead-letter stream; its arguments and error are copied up to deadLetterCopyMax bytes
--   each, a larger one as its size), cancelChannel, inlineMax (largest result carried by the event),
--   queueCount (Q), releaseHeld (bool: nodes were set aside in the shard when the attempt
--   started; then one of its queue's goes back to the stream), toolErrorFails (bool: the call's
--   wire makes a tool error a failed task, 2025-11-25), deferEvents (the first record's decides for
--   the batch: its waiters' events come back with the replies instead of being published)
-- Returns a JSON array, one reply per record, in order: {"outcome": "stale" | "retry" (with
--   delayMs) | "dropped" (task already over) |
--   "settled" (with settled: the task's status, tool: the task's tool, task, and trace: its stored
--   trace context, for the task span the worker writes) | "released" (with count)
--   | "finalize"}, and deadLetter (the entry's id) with nodeTool when a dead letter was written;
--   with deferEvents, that array as `reply` beside the `events` (prelude's with_events)
local batch = cmsgpack.unpack(ARGV[1])
local now = redis_now()
if batch[1] and batch[1].deferEvents then
  defer_events()
end
local SHARD_KEYS = KEYS

local function complete(r)
  -- Each completion sees the keys in the layout of one alone: KEYS[1] task hash (it holds the
  -- nodes), KEYS[2] load hash, KEYS[3] retry zset, KEYS[4] expiring zset, KEYS[5] dead-letter
  -- stream, KEYS[5 + q] the stream of its q-th queue, KEYS[5 + Q + q] that queue's held list.
  local KEYS = {SHARD_KEYS[r.k], SHARD_KEYS[1], SHARD_KEYS[2], SHARD_KEYS[3], SHARD_KEYS[4]}
  for i = 1, 2 * r.queueCount do
    KEYS[5 + i] = SHARD_KEYS[r.k + i]
  end
  local keys = {task = KEYS[1], load = KEYS[2], expiring = KEYS[4], kept = SHARD_KEYS[5]}
  local node = r.node
  local n = node_state(KEYS[1], node, {'status', 'kind', 'ttlMs', 'nodeCount', 'owner', 'createdAt',
    'traceparent', 'waiters', 'tool', nf(node, 'untried'), 'maxBytes', 'bytes', 'progressBase', 'keptMax', 'mode'})
  if n.status ~= 'running' or n.attempt ~= r.attempt then
    return cjson.encode({outcome = 'stale'})
  end
  local function stream(q)
    return KEYS[5 + q]
  end
  ack(stream(n.q), n.entry)
  -- The node's slot is free: a node of its queue set aside in this shard goes back to the stream.
  if r.releaseHeld and KEYS[5 + r.queueCount + n.q] then
    release_held(KEYS[5 + r.queueCount + n.q], stream(n.q), KEYS[2], 1)
  end
  local t = n.task
  local task = {owner = t.owner or '', createdAt = t.createdAt, ttlMs = t.ttlMs, waiters = t.waiters,
    nodeCount = t.nodeCount, bytes = t.bytes, mode = t.mode or false}
  local live = is_live(t.status)
  local dag = t.kind == 'dag'
  local payload = r.payload
  -- In a DAG a tool error is a failed node; a single call reports it as its result.
  local failed = r.outcome == 'failed' or (dag and r.outcome == 'completed' and r.isError)
  if dag and live and r.outcome == 'cancelled' then
    -- A node stopped without a result while its graph runs on has no output for its dependents: it
    -- ends as a failure would (by its onFailure), and is not retried.
    failed = true
    r.final = true
  end
  -- A graph's nodes store their outputs in the task, within its byte budget; one that would pass it
  -- fails for good with an error that says so (a retry would store as much again). What a live task
  -- stores also counts against what its principal may keep in Redis, and passing that fails the
  -- node for good too. A task that is over keeps nothing more.
  if live and r.outcome ~= 'cancelled' then
    if dag then
      local fits, used, budget = fits_budget(t, #payload)
      if not fits then
        payload = over_budget(node, #payload, used, budget)
        failed = true
        r.final = true
        r.deadLetter = false
      end
    end
    local room, held, max = kept_room(KEYS[2], task.owner, #payload, t.keptMax)
    if not room then
      mark_full(KEYS[2], task.owner)
      payload = over_kept(node, #payload, held, max)
      r.message = 'Failed: ' .. cjson.decode(payload).message
      failed = true
      r.outcome = 'failed'
      r.final = true
      r.deadLetter = false
    end
  end

  -- Attempts that were no try of the tool's spend no retry: rounds of input (the node parked and
  -- resumed), attempts whose worker was lost, and attempts handed back by a worker that stopped.
  local tries = r.attempt - tonumber(t[nf(node, 'untried')] or '0')
  if live and failed and not r.final and tries <= n.retries then
    local delay = n.backoffMs * (2 ^ (tries - 1))
    delay = math.floor(math.min(delay, r.maxBackoffMs) * (0.75 + 0.5 * r.jitter))
    -- The attempt's error replaces the one before it.
    store_bytes(KEYS[1], KEYS[2], task.owner, #payload - redis.call('HSTRLEN', KEYS[1], nf(node, 'error')))
    redis.call('HSET', KEYS[1], nf(node, 'status'), 'retry_wait', nf(node, 'error'), payload,
      nf(node, 'finishedAt'), now)
    local queues = cjson.decode(redis.call('HGET', KEYS[1], 'queues') or '[]')
    redis.call('ZADD', KEYS[3], now + delay, cjson.encode({r.task, node, queues[n.q] or ''}))
    wake_maintenance(KEYS[2], r.cancelChannel, now + delay)
    redis.call('HSET', KEYS[1], 'updatedAt', now, 'statusMessage',
      'Node ' .. node .. ' failed (attempt ' .. r.attempt .. '); retrying in ' .. delay .. ' ms')
    return cjson.encode({outcome = 'retry', delayMs = delay})
  end

  local node_status = 'completed'
  if r.outcome == 'cancelled' then
    node_status = 'cancelled'
  elseif failed then
    node_status = 'failed'
  end
  -- The node's fields, written with the task's when the task settles now (one command).
  local node_fields = {nf(node, 'status'), node_status, nf(node, 'finishedAt'), now}
  -- What the node stores: its error (in place of an earlier attempt's) and a graph node's output.
  -- A task that is over takes no more bytes: only how the node ended is written.
  local written = 0
  local function put(field, value)
    node_fields[#node_fields + 1] = nf(node, field)
    node_fields[#node_fields + 1] = value
    written = written + #value
  end
  if live and failed then
    written = -redis.call('HSTRLEN', KEYS[1], nf(node, 'error'))
    put('error', payload)
  end
  if live and dag and (node_status == 'completed' or (failed and n.onFailure == 'continue')) then
    put('output', payload)
  end
  if written ~= 0 then
    task.bytes = (tonumber(t.bytes or '0') or 0) + written
    node_fields[#node_fields + 1] = 'bytes'
    node_fields[#node_fields + 1] = task.bytes
    store_bytes(nil, KEYS[2], task.owner, written)
  end
  local dead_letter = ''
  -- A reply after this point also says whether a dead letter was written, for the worker's metrics.
  local function reply(outcome, fields)
    fields = fields or {}
    fields.outcome = outcome
    if dead_letter ~= '' then
      fields.deadLetter = dead_letter
      fields.nodeTool = n.tool
    end
    return cjson.encode(fields)
  end
  if failed then
    if r.deadLetter then
      -- A graph node's own arguments, or a single call's record (which holds its arguments). The
      -- dead letters are the deployment's, not their owner's, and outlive the task: a copy larger
      -- than the bound is not kept, only its size (a retry reads it from the task while it lives).
      local args_field, args = 'arguments', n.args
      if not args then
        args_field, args = 'call', redis.call('HGET', KEYS[1], 'call') or ''
      end
      local letter = {'task', r.task, 'node', node, 'tool', n.tool, 'owner', task.owner, 'attempts', r.attempt,
        'at', now}
      for field, value in pairs({[args_field] = args, error = payload}) do
        if #value <= r.deadLetterCopyMax then
          letter[#letter + 1] = field
        else
          letter[#letter + 1] = field .. 'Bytes'
          value = tostring(#value)
        end
        letter[#letter + 1] = value
      end
      dead_letter = redis.call('XADD', KEYS[5], 'MAXLEN', '~', 100000, '*', unpack(letter))
    end
  end
  if not live or dag then
    redis.call('HSET', KEYS[1], unpack(node_fields))
  end
  if not live then
    return reply('dropped')
  end

  if not dag then
    local status = r.outcome
    if r.outcome == 'completed' and r.isError and r.toolErrorFails then
      -- That revision's rule: a tool error fails the task (its result is still kept).
      status = 'failed'
    end
    local field = 'result'
    if r.outcome == 'failed' then
      field = 'error'
    elseif r.outcome == 'cancelled' then
      field = nil
    end
    local message = r.message
    if dead_letter ~= '' then
      message = message .. ' (dead letter ' .. dead_letter .. ')'
    end
    settle(keys, r.task, task, status, field, payload, message, now, r.inlineMax, node_fields)
    return reply('settled', {settled = status, tool = t.tool, task = r.task, trace = t.traceparent})
  end

  local settled = redis.call('HINCRBY', KEYS[1], 'nodesSettled', 1)
  local weight_settled = redis.call('HINCRBYFLOAT', KEYS[1], 'weightSettled', n.weight)

  if failed and n.onFailure == 'fail' then
    local reason = 'node ' .. node .. ' failed after ' .. tries .. ' attempt(s)'
    local ok, decoded = pcall(cjson.decode, payload)
    if ok and type(decoded) == 'table' and type(decoded.message) == 'string' then
      reason = reason .. ': ' .. decoded.message
    elseif ok and type(decoded) == 'table' and type(decoded.content) == 'table' and type(decoded.content[1]) == 'table'
        and type(decoded.content[1].text) == 'string' then
      -- A tool error (isError): its first text says what went wrong.
      reason = reason .. ': ' .. string.sub(decoded.content[1].text, 1, 500)
    end
    if dead_letter ~= '' then
      reason = reason .. ' (dead letter ' .. dead_letter .. ')'
    end
    drop_queued(KEYS[1], KEYS[2], 'dropped')
    -- A failed graph is a tool-level failure, like a tool's isError: its result says which node
    -- failed and how every node ended (completed with isError on 2026-07-28; failed, with the
    -- result kept, on 2025-11-25).
    local function failure_result(with_outputs)
      return '{"content":[{"type":"text","text":' .. cjson.encode('Failed: ' .. reason) ..
        '}],"structuredContent":{"failedNode":' .. cjson.encode(node) .. ',"nodes":' ..
        node_outcomes(KEYS[1], with_outputs) .. '},"isError":true}'
    end
    local result = failure_result(true)
    if not fits_budget({maxBytes = t.maxBytes, bytes = task.bytes}, #result)
        or not kept_room(KEYS[2], task.owner, #result, t.keptMax) then
      -- Every node's outputs again would pass the budget: the outcomes say how each node ended, and
      -- why the failed ones failed.
      result = failure_result(false)
    end
    local status = 'completed'
    if r.toolErrorFails then
      status = 'failed'
    end
    settle(keys, r.task, task, status, 'result', result, 'Failed: ' .. reason, now, r.inlineMax)
    -- Stop the task's other running nodes on every worker.
    redis.call('SPUBLISH', r.cancelChannel, r.task)
    return reply('settled', {settled = status, tool = t.tool, task = r.task, trace = t.traceparent})
  end

  local released = 0
  local dependents = cjson.decode(n.dependents or '[]')
  if failed and n.onFailure == 'skipDependents' then
    local queue = dependents
    local i = 1
    while i <= #queue do
      local d = queue[i]
      i = i + 1
      local fields = redis.call('HMGET', KEYS[1], nf(d, 'status'), nf(d, 'weight'), nf(d, 'dependents'))
      if fields[1] == 'pending' then
        redis.call('HSET', KEYS[1], nf(d, 'status'), 'skipped', nf(d, 'finishedAt'), now)
        settled = redis.call('HINCRBY', KEYS[1], 'nodesSettled', 1)
        weight_settled = redis.call('HINCRBYFLOAT', KEYS[1], 'weightSettled', fields[2] or '1')
        for _, next in ipairs(cjson.decode(fields[3] or '[]')) do
          queue[#queue + 1] = next
        end
      end
    end
  else
    for _, d in ipairs(dependents) do
      local left = redis.call('HINCRBY', KEYS[1], nf(d, 'deps'), -1)
      if left == 0 then
        local fields = redis.call('HMGET', KEYS[1], nf(d, 'status'), nf(d, 'tool'), nf(d, 'q'))
        if fields[1] == 'pending' then
          enqueue(KEYS[1], stream(tonumber(fields[3] or '1')), KEYS[2], r.task, d, fields[2] or '', t.traceparent)
          released = released + 1
        end
      end
    end
  end

  -- A planned graph counts on from what its planner reported (progressBase), so that it never goes back.
  local base = tonumber(t.progressBase or '0') or 0
  local progress = base + tonumber(weight_settled)
  local total = base + tonumber(redis.call('HGET', KEYS[1], 'weightTotal'))
  local message = settled .. ' of ' .. t.nodeCount .. ' nodes settled'
  redis.call('HSET', KEYS[1], 'progress', progress, 'total', total, 'updatedAt', now, 'statusMessage', message)
  notify(KEYS[1], cjson.encode({task = r.task, type = 'progress', progress = progress, total = total,
    message = message}), t.waiters)
  if settled >= tonumber(t.nodeCount) then
    -- The built-in queue is always the task's first queue.
    redis.call('XADD', stream(1), '*', 'task', r.task, 'node', '$finalize', 'trace', t.traceparent or '')
    return reply('finalize')
  end
  return reply('released', {count = released})
end

local replies = {}
for i, r in ipairs(batch) do
  replies[i] = complete(r)
end
return with_events('[' .. table.concat(replies, ',') .. ']')
