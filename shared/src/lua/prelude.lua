-- prelude: helpers every transition shares. scripts.rs puts this file in front of each script,
-- so that the rules below (how a node joins and leaves its queue, how an entry is acknowledged,
-- how a task settles and who hears of it) are written once. Nothing here builds a key name:
-- keys come from KEYS, and a waiter's inbox channel is data that the Rust side stored.
local GROUP = 'workers'

local function is_live(status)
  return status == 'working' or status == 'input_required'
end

-- The field of one node in a task's nodes hash.
local function nf(node, field)
  return node .. ':' .. field
end

-- A work entry is done with: acknowledged and deleted, so the stream holds only live work.
local function ack(stream, entry)
  if entry and entry ~= '' then
    redis.call('XACK', stream, GROUP, entry)
    redis.call('XDEL', stream, entry)
  end
end

-- A node joins its queue under a new stream entry, bound to the node so that any other entry
-- of the same node is known to be stale; the load counters follow.
local function enqueue(nodes, stream, load, task_id, node, tool, trace)
  local entry = redis.call('XADD', stream, '*', 'task', task_id, 'node', node, 'trace', trace or '')
  redis.call('HSET', nodes, nf(node, 'status'), 'queued', nf(node, 'entry'), entry)
  redis.call('HINCRBY', load, 'queued', 1)
  redis.call('HINCRBY', load, 'queued:' .. tool, 1)
  return entry
end

-- A queued node leaves its queue (started, dropped, cancelled or expired).
local function dequeued(load, tool, count)
  redis.call('HINCRBY', load, 'queued', -(count or 1))
  redis.call('HINCRBY', load, 'queued:' .. tool, -(count or 1))
end

-- A task that ends takes its queued nodes out of the load counts: they will never start, and
-- their entries are dropped when a worker reads them. `status` is what they become.
local function drop_queued(nodes, load, status)
  local fields = redis.call('HGETALL', nodes)
  local queued = {}
  for i = 1, #fields, 2 do
    if fields[i + 1] == 'queued' and string.sub(fields[i], -7) == ':status' then
      queued[string.sub(fields[i], 1, -8)] = true
    end
  end
  for i = 1, #fields, 2 do
    local node = string.sub(fields[i], 1, -6)
    if string.sub(fields[i], -5) == ':tool' and queued[node] then
      dequeued(load, fields[i + 1])
      if status then
        redis.call('HSET', nodes, nf(node, 'status'), status)
      end
    end
  end
end

-- Sends an event to every process waiting on the task (their inbox channels, stored by them).
local function notify(task, message)
  local waiters = redis.call('HGET', task, 'waiters')
  if waiters and waiters ~= '' and waiters ~= '[]' then
    for _, channel in ipairs(cjson.decode(waiters)) do
      redis.call('SPUBLISH', channel, message)
    end
  end
end

-- A status event; `field` and `value` (raw JSON) travel along when the value is small enough,
-- so that a waiting gateway answers without reading the task again.
local function status_event(task_id, status, message, field, value, inline_max)
  local event = '{"task":' .. cjson.encode(task_id) .. ',"type":"status","status":"' .. status ..
    '","message":' .. cjson.encode(message)
  if field and value and #value <= (inline_max or 0) then
    event = event .. ',"' .. field .. '":' .. value
  end
  return event .. '}'
end

-- A live task ends: its status never changes again, it leaves its owner's live count and the
-- expiry index, its keys expire when its TTL (counted from creation) runs out, and its waiters
-- hear of it. `t` holds the task's owner, createdAt and ttlMs.
local function settle(keys, task_id, t, status, field, value, message, now, inline_max)
  if field then
    redis.call('HSET', keys.task, 'status', status, field, value, 'statusMessage', message, 'updatedAt', now)
  else
    redis.call('HSET', keys.task, 'status', status, 'statusMessage', message, 'updatedAt', now)
  end
  redis.call('HINCRBY', keys.load, 'live:' .. t.owner, -1)
  redis.call('ZREM', keys.expiring, task_id)
  local expires = tonumber(t.createdAt) + tonumber(t.ttlMs)
  redis.call('PEXPIREAT', keys.task, expires)
  redis.call('PEXPIREAT', keys.nodes, expires)
  notify(keys.task, status_event(task_id, status, message, field, value, inline_max))
end

-- The stored record of a node, with the defaults a single tool call leaves out.
local function node_state(nodes, node)
  local v = redis.call('HMGET', nodes,
    nf(node, 'status'), nf(node, 'attempt'), nf(node, 'tool'), nf(node, 'entry'), nf(node, 'q'),
    nf(node, 'retries'), nf(node, 'backoffMs'), nf(node, 'onFailure'), nf(node, 'weight'),
    nf(node, 'dependents'), nf(node, 'losses'))
  return {
    status = v[1], attempt = tonumber(v[2] or '0'), tool = v[3] or '', entry = v[4] or '',
    q = tonumber(v[5] or '1'), retries = tonumber(v[6] or '0'), backoffMs = tonumber(v[7] or '200'),
    onFailure = v[8] or 'fail', weight = v[9] or '1', dependents = v[10], losses = tonumber(v[11] or '0'),
  }
end

-- Writes a new node (of a created task or a planned graph); a node without dependencies joins
-- its queue at once. Fields at their defaults are left out.
local function write_node(keys, streams, task_id, n, trace)
  local fields = {nf(n.id, 'status'), 'pending', nf(n.id, 'attempt'), 0, nf(n.id, 'tool'), n.tool,
    nf(n.id, 'args'), n.args, nf(n.id, 'q'), n.q}
  local function put(field, value, default)
    if value ~= nil and value ~= default then
      fields[#fields + 1] = nf(n.id, field)
      fields[#fields + 1] = value
    end
  end
  put('deps', n.deps, 0)
  if n.dependents and #n.dependents > 0 then
    put('dependents', cjson.encode(n.dependents), nil)
  end
  put('retries', n.retries, 0)
  put('backoffMs', n.backoffMs, 200)
  put('timeoutMs', n.timeoutMs, 0)
  put('onFailure', n.onFailure, 'fail')
  put('weight', n.weight, '1')
  redis.call('HSET', keys.nodes, unpack(fields))
  if n.deps == 0 then
    enqueue(keys.nodes, streams[n.q], keys.load, task_id, n.id, n.tool, trace)
  end
end
