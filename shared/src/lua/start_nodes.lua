-- start_nodes: a worker starts a batch of work entries it read from one shard, in one step. Each
-- entry either starts its node's next attempt (the attempt number is the fencing token, and the
-- entry is bound to it), waits with the worker or is set aside because the worker already gives
-- the node's owner its share of its slots, is handed back to its queue (the worker has no free
-- slot for it), or is acknowledged and dropped (its task is gone or over, or it is not the node's
-- current entry).
--
-- A node set aside waits in its queue's held list, still queued but with no entry, so that the
-- entries behind it (other principals' work) are read at once; it goes back to the stream when a
-- node of that queue finishes in this shard (complete_node) or by the shard's maintenance.
--
-- KEYS[1] the shard's load hash, then for each item i: KEYS[3i-1] task hash (it holds the nodes),
--   KEYS[3i] the stream the entry came from, KEYS[3i+1] that queue's held list
-- ARGV[1] the record (MessagePack): worker, items (each: task, node, entry, trace, run (bool: false
--   hands the entry back), mayDefer (bool: an entry whose owner has its share is set aside; else
--   it is left as it is, for the worker to try again when a slot of that owner's frees)), room
--   (owner -> slots this worker still gives that owner), defaultRoom (slots it gives an owner not in
--   room; -1: no share), cancelChannel (the shard's), releaseAfterMs (a node set aside goes back
--   to its stream by the shard's maintenance within this long)
-- Returns an array, one result per item, in order, each an array (not JSON: the call record
-- travels as it is stored, never escaped into another document):
--   {"run", attempt, tool, args (a graph node's own JSON text; "" for a single call's, which runs
--    with the call's), call (the call record's text as stored), timeoutMs, losses, queues (the
--    task's queues as stored: a JSON array text), answers (JSON text or ""), state (JSON text or
--    ""), owner, setAside (1 | 0)}
--   (setAside: nodes were set aside in this shard when the batch started, so that the attempt's
--   completion puts one back)
--   (answers and state: what a parked node was given when it resumed, or "")
--   | {"capped", owner} (nothing changed) | {"deferred"} | {"handedBack"} | {"skip", reason}
--   | {"bad", reason} (the item raised an error: a record that cannot be read, a write Redis
--   refused; it fails alone, and what it wrote before the error stays: the worker may try it again)
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local load = KEYS[1]
local room = r.room
-- Read once per batch, so that a completion looks at the held lists only when there is something
-- in them; what is set aside later is put back by the shard's maintenance, or by a later node.
local set_aside = tonumber(redis.call('HGET', load, 'held') or '0') > 0
local results = {}
local function start(i, item)
  local nodes, stream, held = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local node = item.node
  local n = node_state(nodes, node, {'status', 'kind', 'call', 'nodesSettled', 'nodeCount', 'queues', 'createdAt',
    'ttlMs', nf(node, 'answers'), nf(node, 'state'), 'owner', 'adopt'}, true)
  local t = n.task
  local owner = t.owner or ''
  local result
  local function run(attempt)
    return {'run', attempt, n.tool, n.args or '', t.call or '', n.timeoutMs, n.losses, t.queues or '[]',
      t[nf(node, 'answers')] or '', t[nf(node, 'state')] or '', owner, set_aside and 1 or 0}
  end
  local left = room[owner] or r.defaultRoom
  if n.status == 'running' and n.entry == item.entry then
    -- This worker already started it (its reply was lost and the batch was sent again).
    result = run(n.attempt)
  elseif not t.status then
    ack(stream, item.entry)
    result = {'skip', 'task no longer exists'}
  elseif n.status ~= 'queued' or not is_current(n, item.entry) then
    ack(stream, item.entry)
    result = {'skip', 'not the current entry of node ' .. node .. ' (' .. tostring(n.status) .. ')'}
  elseif not item.run then
    -- The new entry carries what the old one did: a lean entry (it carries its call, ADR-0028)
    -- stays lean for the worker that reads it next.
    local old = redis.call('XRANGE', stream, item.entry, item.entry)
    local fields = {'task', item.task, 'node', node, 'trace', item.trace or ''}
    if old[1] then
      fields = old[1][2]
    end
    ack(stream, item.entry)
    local entry = redis.call('XADD', stream, '*', unpack(fields))
    redis.call('HSET', nodes, nf(node, 'entry'), entry)
    result = {'handedBack'}
  elseif not is_live(t.status) then
    dequeued(load, n.tool)
    redis.call('HSET', nodes, nf(node, 'status'), 'dropped')
    ack(stream, item.entry)
    result = {'skip', 'task is ' .. t.status}
  elseif tonumber(t.createdAt) + tonumber(t.ttlMs) <= now then
    -- Past its TTL: the shard's maintenance expires the task and frees its load.
    ack(stream, item.entry)
    result = {'skip', 'task expired'}
  elseif left >= 0 and left < 1 and not item.mayDefer then
    -- The worker's share for this owner is taken: the entry stays pending with it, unchanged, for
    -- a moment; a short node of the owner's frees a slot soon enough.
    result = {'capped', owner}
  elseif left >= 0 and left < 1 then
    -- Still no room after that moment: set aside, so that what follows it is read.
    ack(stream, item.entry)
    redis.call('RPUSH', held, item.task .. '\t' .. node .. '\t' .. (item.trace or ''))
    redis.call('HINCRBY', load, 'held', '1')
    if not set_aside then
      -- The shard's maintenance puts it back if no finishing node of its queue does first.
      wake_maintenance(load, r.cancelChannel, now + r.releaseAfterMs)
    end
    set_aside = true
    redis.call('HSET', nodes, nf(node, 'entry'), '')
    result = {'deferred'}
  else
    if left >= 0 then
      room[owner] = left - 1
    end
    dequeued(load, n.tool)
    local attempt = n.attempt + 1
    local fields = {nf(node, 'status'), 'running', nf(node, 'attempt'), attempt, nf(node, 'startedAt'), now,
      nf(node, 'worker'), r.worker}
    if n.entry ~= item.entry then
      -- A node that was set aside is bound to the entry it starts from now.
      fields[#fields + 1] = nf(node, 'entry')
      fields[#fields + 1] = item.entry
    end
    if t.adopt then
      -- A lean call adopted (ADR-0028): the fields its gateway folded into `adopt` (store/lean.rs)
      -- take their own names, as create_task writes them.
      for name, value in string.gmatch(t.adopt, '([^\t]+)\t([^\t]+)') do
        fields[#fields + 1] = name
        fields[#fields + 1] = value
      end
      redis.call('HDEL', nodes, 'adopt')
    end
    if t.kind == 'dag' then
      fields[#fields + 1] = 'updatedAt'
      fields[#fields + 1] = now
      fields[#fields + 1] = 'statusMessage'
      fields[#fields + 1] = 'Running ' .. node .. ' (' .. t.nodesSettled .. ' of ' .. t.nodeCount .. ' nodes settled)'
    end
    redis.call('HSET', nodes, unpack(fields))
    result = run(attempt)
  end
  return result
end
for i, item in ipairs(r.items) do
  -- One unreadable record must not fail the batch: the items before it have already started.
  local ok, result = pcall(start, i, item)
  if not ok then
    if type(result) == 'table' then
      result = result.err or cjson.encode(result)
    end
    result = {'bad', tostring(result)}
  end
  results[i] = result
end
if set_aside then
  -- Nodes set aside by this very batch wait for the ones it started.
  for _, result in ipairs(results) do
    if result[1] == 'run' then
      result[12] = 1
    end
  end
end
return results
