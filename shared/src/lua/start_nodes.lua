-- start_nodes: a worker starts a batch of work entries it read from one shard, in one step. Each
-- entry either starts its node's next attempt (the attempt number is the fencing token, and the
-- entry is bound to it), is handed back to its queue (the worker has no free slot for it), or is
-- acknowledged and dropped (its task is gone or over, or it is not the node's current entry).
--
-- KEYS[1] the shard's load hash, then for each item i: KEYS[3i-1] task hash, KEYS[3i] nodes hash,
--   KEYS[3i+1] the stream the entry came from
-- ARGV[1] the record (JSON): now, worker, items (each: task, node, entry, trace, run (bool: false
--   hands the entry back))
-- Returns JSON: one result per item, in order:
--   {"outcome":"run","attempt":n,"tool":t,"args":json-text,"token":json-text,"timeoutMs":n,
--    "losses":n,"queues":[...],"kind":k,"answers":json-text,"state":json-text,"caps":json-text,
--    "logLevel":level-or-""}
--   (answers and state: what a parked node was given when it resumed, or "")
--   | {"outcome":"handedBack"} | {"outcome":"skip","reason":text}
local r = cjson.decode(ARGV[1])
local load = KEYS[1]
local results = {}
for i, item in ipairs(r.items) do
  local task, nodes, stream = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local node = item.node
  local n = node_state(nodes, node, {'status', 'kind', 'progressToken', 'nodesSettled', 'nodeCount',
    'queues', 'createdAt', 'ttlMs', 'clientCaps', nf(node, 'answers'), nf(node, 'state'), 'logLevel'})
  local t = n.task
  local result
  local function run(attempt)
    return {outcome = 'run', attempt = attempt, tool = n.tool, args = n.args or '{}', token = t.progressToken or '',
      timeoutMs = n.timeoutMs, losses = n.losses, queues = cjson.decode(t.queues or '[]'), kind = t.kind or 'single',
      answers = t[nf(node, 'answers')] or '', state = t[nf(node, 'state')] or '', caps = t.clientCaps or '{}',
      logLevel = t.logLevel or ''}
  end
  if n.status == 'running' and n.entry == item.entry then
    -- This worker already started it (its reply was lost and the batch was sent again).
    result = run(n.attempt)
  elseif not t.status then
    ack(stream, item.entry)
    result = {outcome = 'skip', reason = 'task no longer exists'}
  elseif n.status ~= 'queued' or n.entry ~= item.entry then
    ack(stream, item.entry)
    result = {outcome = 'skip', reason = 'not the current entry of node ' .. node .. ' (' .. tostring(n.status) .. ')'}
  elseif not item.run then
    ack(stream, item.entry)
    local entry = redis.call('XADD', stream, '*', 'task', item.task, 'node', node, 'trace', item.trace or '')
    redis.call('HSET', nodes, nf(node, 'entry'), entry)
    result = {outcome = 'handedBack'}
  elseif not is_live(t.status) then
    dequeued(load, n.tool)
    redis.call('HSET', nodes, nf(node, 'status'), 'dropped')
    ack(stream, item.entry)
    result = {outcome = 'skip', reason = 'task is ' .. t.status}
  elseif tonumber(t.createdAt) + tonumber(t.ttlMs) <= r.now then
    -- Past its TTL: the shard's maintenance expires the task and frees its load.
    ack(stream, item.entry)
    result = {outcome = 'skip', reason = 'task expired'}
  else
    dequeued(load, n.tool)
    local attempt = n.attempt + 1
    if t.kind == 'dag' then
      redis.call('HSET', nodes, nf(node, 'status'), 'running', nf(node, 'attempt'), attempt,
        nf(node, 'startedAt'), r.now, nf(node, 'worker'), r.worker, 'updatedAt', r.now, 'statusMessage',
        'Running ' .. node .. ' (' .. t.nodesSettled .. ' of ' .. t.nodeCount .. ' nodes settled)')
    else
      redis.call('HSET', nodes, nf(node, 'status'), 'running', nf(node, 'attempt'), attempt,
        nf(node, 'startedAt'), r.now, nf(node, 'worker'), r.worker)
    end
    result = run(attempt)
  end
  results[i] = result
end
return cjson.encode(results)
