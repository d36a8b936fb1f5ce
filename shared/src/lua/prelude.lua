-- prelude: helpers every transition shares. scripts.rs puts this file in front of each script,
-- so that the rules below (how a node joins and leaves its queue, how an entry is acknowledged,
-- how a task settles and who hears of it) are written once. Nothing here builds a key name:
-- keys come from KEYS, and a waiter's inbox channel is data that the Rust side stored.
local GROUP = 'workers'
-- The message on a shard's cancel channel that wakes its maintenance (never a task id).
local MAINTAIN_NOTICE = '$maintain'

-- Redis's clock in milliseconds: every time a script stores or compares comes from this one
-- clock, never from the clocks of the processes that call it.
local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The shard's maintenance must look at it by `due` (Redis ms): when that is sooner than the look
-- it has planned (the load hash's `wake`, absent when none), the plan moves and the maintenance
-- holder is told on the shard's cancel channel. Called where a retry or an expiry is scheduled.
local function wake_maintenance(load, channel, due, planned)
  if planned == nil then
    planned = redis.call('HGET', load, 'wake')
  end
  planned = tonumber(planned)
  if not planned or due < planned then
    redis.call('HSET', load, 'wake', due)
    redis.call('SPUBLISH', channel, MAINTAIN_NOTICE)
  end
end

-- `-by` as an argument of a command. Numbers cost Redis a formatting each time they go to a
-- command; the usual one-step counts go as ready texts.
local function minus(by)
  if by == 1 then
    return '-1'
  end
  return -by
end

local function is_live(status)
  return status == 'working' or status == 'input_required'
end

-- The field of one node in its task's hash.
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
  redis.call('HINCRBY', load, 'queued', '1')
  redis.call('HINCRBY', load, 'queued:' .. tool, '1')
  return entry
end

-- Whether `entry` is the stream entry node `n` may start from: the one bound to it, or any entry
-- of a node that was set aside (queued, with no entry: it went back to its stream unbound, see
-- release_held).
local function is_current(n, entry)
  return n.entry == entry or (n.status == 'queued' and n.entry == '')
end

-- Nodes set aside in a queue's held list go back to its stream, up to `count`, oldest first: a
-- slot of that queue came free. Each keeps no entry until a worker starts it (is_current). An
-- item whose node has moved on meanwhile is skipped by the start that reads it.
local function release_held(held, stream, load, count)
  local items = redis.call('LPOP', held, count)
  if not items then
    return 0
  end
  for _, item in ipairs(items) do
    local task, node, trace = string.match(item, '^([^\t]*)\t([^\t]*)\t(.*)$')
    if task then
      redis.call('XADD', stream, '*', 'task', task, 'node', node, 'trace', trace)
    end
  end
  redis.call('HINCRBY', load, 'held', -#items)
  return #items
end

-- A queued node leaves its queue (started, dropped, cancelled or expired).
-- Counts a per-owner or per-tool field of the load hash down; one that reaches zero leaves the hash,
-- so that it holds the owners and tools with work in the shard, not every one there ever was.
local function count_down(load, field, by)
  if redis.call('HINCRBY', load, field, minus(by)) == 0 then
    redis.call('HDEL', load, field)
  end
end

local function dequeued(load, tool, count)
  redis.call('HINCRBY', load, 'queued', minus(count or 1))
  count_down(load, 'queued:' .. tool, count or 1)
end

-- A task that ends takes its queued nodes out of the load counts: they will never start. With
-- `streams` (the task's work streams, in the order of its queues), their entries are acknowledged
-- and deleted, so that no worker runs one: a lean entry runs from its delivery, with no start
-- script to refuse it (ADR-0028); without, a worker that reads one drops it. `status` is what they
-- become, at `now` (their `finishedAt`) when given.
local function drop_queued(nodes, load, status, streams, now)
  local fields = redis.call('HGETALL', nodes)
  local queued = {}
  for i = 1, #fields, 2 do
    if fields[i + 1] == 'queued' and string.sub(fields[i], -7) == ':status' then
      queued[string.sub(fields[i], 1, -8)] = {}
    end
  end
  for i = 1, #fields, 2 do
    local node, field = string.match(fields[i], '^(.*):(%a+)$')
    if node and queued[node] then
      queued[node][field] = fields[i + 1]
    end
  end
  for node, n in pairs(queued) do
    dequeued(load, n.tool or '')
    if status and now then
      redis.call('HSET', nodes, nf(node, 'status'), status, nf(node, 'finishedAt'), now)
    elseif status then
      redis.call('HSET', nodes, nf(node, 'status'), status)
    end
    local stream = streams and streams[tonumber(n.q or '1')]
    if stream then
      ack(stream, n.entry)
    end
  end
end

-- Events a transition keeps for its caller instead of publishing them: on a deployment that waits
-- for replicas (`CONVEYOR_REDIS_WAIT_REPLICAS`), no client may hear of a transition before enough
-- replicas have it, so the caller publishes them after its `WAIT` (a script that takes
-- `deferEvents` calls defer_events first, and answers with_events). nil: published at once.
local deferred_events = nil

local function defer_events()
  deferred_events = {}
end

-- Publishes `message` on a waiter's inbox `channel`, or keeps it for the caller (defer_events).
local function publish(channel, message)
  if deferred_events then
    deferred_events[#deferred_events + 1] = {channel, message}
  else
    redis.call('SPUBLISH', channel, message)
  end
end

-- A script's reply (JSON text), with the events it kept when they are deferred:
-- {"events": [[channel, message], ...], "reply": <reply>}.
local function with_events(reply)
  if not deferred_events then
    return reply
  end
  local events = '[]'
  if #deferred_events > 0 then
    events = cjson.encode(deferred_events)
  end
  return '{"events":' .. events .. ',"reply":' .. reply .. '}'
end

-- Sends an event to every process waiting on the task (their inbox channels, stored by them).
-- `waiters` is the task's `waiters` field when the caller has already read it.
local function notify(task, message, waiters)
  if waiters == nil then
    waiters = redis.call('HGET', task, 'waiters')
  end
  if waiters and waiters ~= '' and waiters ~= '[]' then
    -- One waiter (a synchronous call's gateway) is the usual case: its channel is read without a
    -- JSON decode. Channel names hold no quote, comma or backslash.
    local single = string.match(waiters, '^%["([^",\\]*)"%]$')
    if single then
      publish(single, message)
      return
    end
    for _, channel in ipairs(cjson.decode(waiters)) do
      publish(channel, message)
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

-- The nodes of a graph that wait for none (`deps == 0`): how many, and how many of each tool, for
-- the queued and per-tool limits.
local function root_counts(nodes)
  local roots, by_tool = 0, {}
  for _, n in ipairs(nodes) do
    if n.deps == 0 then
      roots = roots + 1
      by_tool[n.tool] = (by_tool[n.tool] or 0) + 1
    end
  end
  return roots, by_tool
end

-- The count of nodes an owner's live tasks hold beyond their first (`nodes:<owner>` in the load
-- hash) moves by `delta`. With the live count (one per task) it says how many nodes the owner's
-- live tasks hold; a single call has one node and never touches it.
local function hold_nodes(load, owner, delta)
  if delta > 0 then
    redis.call('HINCRBY', load, 'nodes:' .. owner, delta)
  elseif delta < 0 then
    count_down(load, 'nodes:' .. owner, -delta)
  end
end

-- What a principal keeps in the shard (`kept:<owner>` of the load hash, in bytes) against its share
-- of the deployment's budget of stored bytes, as its task was created with (the task's `keptMax`;
-- absent: none). Returns whether `more` bytes still fit, what the principal keeps, and the share.
local function kept_room(load, owner, more, share)
  share = tonumber(share or '-1') or -1
  if share < 0 then
    return true, 0, share
  end
  local held = tonumber(redis.call('HGET', load, 'kept:' .. owner) or '0') or 0
  return held + more <= share, held, share
end

-- A principal's output did not fit in what it may keep in the shard: until some of its bytes
-- there are given back, a new call of its is refused in this shard (`full:<owner>`), so that it
-- hears of the budget at the door instead of from one failed task after another.
local function mark_full(load, owner)
  redis.call('HSET', load, 'full:' .. owner, '1')
end

-- `by` bytes fewer are kept by `owner` in the shard: room again for its calls.
local function give_back(load, owner, by)
  count_down(load, 'kept:' .. owner, by)
  redis.call('HDEL', load, 'full:' .. owner)
end

-- `by` bytes more (fewer, when negative) are stored in a task of `owner`: its `bytes` and the
-- owner's `kept:<owner>` move together, so that what the task gives back when its keys go is what
-- it took.
local function store_bytes(task, load, owner, by)
  if by == 0 then
    return
  end
  -- Without `task`, the caller writes the task's `bytes` itself, with its other fields.
  if task then
    redis.call('HINCRBY', task, 'bytes', by)
  end
  if by > 0 then
    redis.call('HINCRBY', load, 'kept:' .. owner, by)
  else
    give_back(load, owner, -by)
  end
end

-- The error of a node whose output would pass what its principal may keep in Redis, as JSON text.
local function over_kept(node, size, held, max)
  return cjson.encode({code = -32603,
    message = 'node ' .. node .. ' would store ' .. size .. ' bytes, which passes what its principal may keep ' ..
      'in Redis (stored_bytes_per_principal: ' .. held .. ' bytes kept where this task lives, whose share of ' ..
      'the budget is ' .. max .. '); the principal\'s finished tasks give their bytes back when their TTL runs out',
    data = {limit = 'stored_bytes_per_principal', max = max, held = held, size = size}})
end

-- The expiring and kept indexes (`keys.expiring`, `keys.kept`) each hold this member, scored past
-- any time a task can reach, from their first insert on: it is longer than Redis's
-- `zset-max-listpack-value` (64 bytes by default), so Redis keeps them as skip lists. A small
-- sorted set is a listpack, and an insert into it scans every entry before it, parsing each score:
-- with a batch's times, always the latest, appended past up to 128 entries, that was 20,000
-- instructions of Redis's per call (ADR-0028). Readers bound their ranges below its score (keys.rs's
-- INDEX_PIN, INDEX_PIN_SCORE); create_calls.lua and complete_calls.lua keep their own copies.
local INDEX_PIN = '~ this member keeps the index a skip list: inserting into a listpack scans all of it'
local INDEX_PIN_SCORE = 100000000000000

-- How long a task that settles at or after its TTL is kept after it settles (and one with waiters
-- that settles closer to its TTL than this), so that a waiter told of a result too large to travel
-- with the event, or a client that polled the task to its end, can still read it.
local SETTLED_GRACE_MS = 30000

-- The kept index (`keys.kept`) holds one member per owner and 100 ms of expiry times,
-- `<bucket>\t<owner>` (the bucket: the expiry time in ms, divided by 100 and rounded down),
-- scored by the end of its bucket; the bytes its settled tasks keep add up in the load hash, under
-- `keptAt:<member>`. One member per task made the index as large as the tasks it counts (tens of
-- bytes each, for a TTL), and each of them a sorted-set insert. complete_calls.lua keeps its own
-- copy of these two lines.
local KEPT_BUCKET_MS = 100
local function keep_until(load, kept, expires, owner, bytes)
  local bucket = math.floor(expires / KEPT_BUCKET_MS)
  local member = string.format('%d', bucket) .. '\t' .. owner
  redis.call('ZADD', kept, (bucket + 1) * KEPT_BUCKET_MS, member, INDEX_PIN_SCORE, INDEX_PIN)
  redis.call('HINCRBY', load, 'keptAt:' .. member, bytes)
end

-- When a settled task's keys expire: when its TTL (counted from creation) runs out, or a grace
-- after now when it settles later than that (or, with waiters, close to it; ADR-0024). The hidden
-- task of a synchronous call (mode `sync`: it never became the client's task) is kept no longer
-- than the grace after it settles: its answer went to its caller, nobody else can name it, and a
-- TTL's worth of answered calls would hold Redis's memory for nothing. complete_calls.lua keeps its
-- own copy of this rule.
local function settled_expiry(created_at, ttl_ms, waiters, mode, now)
  local expires = tonumber(created_at) + tonumber(ttl_ms)
  local waited = waiters and waiters ~= '' and waiters ~= '[]'
  if expires <= now or (waited and expires < now + SETTLED_GRACE_MS) then
    expires = now + SETTLED_GRACE_MS
  elseif mode == 'sync' and expires > now + SETTLED_GRACE_MS then
    expires = now + SETTLED_GRACE_MS
  end
  return expires
end

-- A live task ends: its status never changes again, it leaves its owner's live and node counts
-- and the expiry index, its keys expire when its TTL (counted from creation) runs out, or a grace
-- after now when it settles later than that (or, with waiters, close to it), and its waiters hear
-- of it. What it stores (its `bytes`, and `value`) stays counted in its owner's
-- `kept:<owner>` until then: the shard's kept index (`keys.kept`) tells the maintenance when to
-- give it back. `t` holds the task's owner, createdAt, ttlMs, nodeCount, bytes, mode, (when
-- read) waiters, and parkedRound (read by the scripts that may end a call parked in an input round); `extra` are more fields to write to the task's hash in the same command (the settling
-- node's).
local function settle(keys, task_id, t, status, field, value, message, now, inline_max, extra)
  local fields = extra or {}
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = status
  fields[#fields + 1] = 'statusMessage'
  fields[#fields + 1] = message
  fields[#fields + 1] = 'updatedAt'
  fields[#fields + 1] = now
  if field then
    fields[#fields + 1] = field
    fields[#fields + 1] = value
  end
  local kept = tonumber(t.bytes or '0') or 0
  if field and value then
    kept = kept + #value
    fields[#fields + 1] = 'bytes'
    fields[#fields + 1] = kept
    redis.call('HINCRBY', keys.load, 'kept:' .. t.owner, #value)
  end
  redis.call('HSET', keys.task, unpack(fields))
  -- A call parked in an input round its client was told of holds a round, not a live slot.
  if t.parkedRound then
    count_down(keys.load, 'rounds:' .. t.owner, 1)
  else
    count_down(keys.load, 'live:' .. t.owner, 1)
  end
  hold_nodes(keys.load, t.owner, 1 - (tonumber(t.nodeCount) or 1))
  redis.call('ZREM', keys.expiring, task_id)
  if t.waiters == nil then
    t.waiters = redis.call('HGET', keys.task, 'waiters') or false
  end
  local expires = settled_expiry(t.createdAt, t.ttlMs, t.waiters, t.mode, now)
  redis.call('PEXPIREAT', keys.task, expires)
  if kept > 0 then
    keep_until(keys.load, keys.kept, expires, t.owner, kept)
  end
  notify(keys.task, status_event(task_id, status, message, field, value, inline_max), t.waiters)
end

-- A task's budget of stored bytes (`maxBytes`, set at creation; 0 or absent: none) against what
-- its nodes have stored so far (`bytes`). Returns whether `more` bytes still fit, and the total
-- they would make.
local function fits_budget(t, more)
  local budget = tonumber(t.maxBytes or '0') or 0
  local used = (tonumber(t.bytes or '0') or 0) + more
  return budget <= 0 or used <= budget, used, budget
end

-- The error of a node whose output would pass its task's byte budget, as JSON text.
local function over_budget(node, size, used, budget)
  return cjson.encode({code = -32603,
    message = 'node ' .. node .. ' would store ' .. size .. ' bytes, which passes its task\'s budget of ' ..
      budget .. ' bytes (max_task_bytes; ' .. (used - size) .. ' already stored)',
    data = {limit = 'max_task_bytes', max = budget, size = size}})
end

-- The stored record of a node, with the defaults a single tool call leaves out, and the named
-- fields of its task (a task's nodes live in its hash, so one HMGET reads both): `n.task[name]`.
-- With `to_start`, only what starting an attempt needs is read (status, attempt, tool, entry,
-- losses, args, timeoutMs): a start reads no more of the hash than it uses.
local NODE_FIELDS = {'status', 'attempt', 'tool', 'entry', 'losses', 'args', 'timeoutMs', 'q', 'retries',
  'backoffMs', 'onFailure', 'weight', 'dependents'}
local START_FIELD_COUNT = 7
local function node_state(nodes, node, task_fields, to_start)
  local count = #NODE_FIELDS
  if to_start then
    count = START_FIELD_COUNT
  end
  local fields = {}
  for i = 1, count do
    fields[i] = nf(node, NODE_FIELDS[i])
  end
  task_fields = task_fields or {}
  for i, name in ipairs(task_fields) do
    fields[count + i] = name
  end
  local v = redis.call('HMGET', nodes, unpack(fields))
  local task = {}
  for i, name in ipairs(task_fields) do
    task[name] = v[count + i]
  end
  return {
    status = v[1], attempt = tonumber(v[2] or '0'), tool = v[3] or '', entry = v[4] or '',
    losses = tonumber(v[5] or '0'), args = v[6], timeoutMs = tonumber(v[7] or '0'),
    q = tonumber(v[8] or '1'), retries = tonumber(v[9] or '0'), backoffMs = tonumber(v[10] or '200'),
    onFailure = v[11] or 'fail', weight = v[12] or '1', dependents = v[13], task = task,
  }
end

-- Writes a new node (of a created task or a planned graph); a node without dependencies joins
-- its queue at once, or, with `hold`, is counted as queued with no entry yet (release_task gives it
-- one). Fields at their defaults are left out. `fields` may already hold fields of the task's hash
-- to write in the same command.
local function write_node(keys, streams, task_id, n, trace, fields, hold)
  fields = fields or {}
  local status = 'pending'
  if n.deps == 0 then
    status = 'queued'
    if not hold then
      local entry = redis.call('XADD', streams[n.q], '*', 'task', task_id, 'node', n.id, 'trace', trace or '')
      fields[#fields + 1] = nf(n.id, 'entry')
      fields[#fields + 1] = entry
    end
    redis.call('HINCRBY', keys.load, 'queued', '1')
    redis.call('HINCRBY', keys.load, 'queued:' .. n.tool, '1')
  end
  local more = {nf(n.id, 'status'), status, nf(n.id, 'attempt'), '0', nf(n.id, 'tool'), n.tool, nf(n.id, 'q'), n.q}
  for _, v in ipairs(more) do
    fields[#fields + 1] = v
  end
  local function put(field, value, default)
    if value ~= nil and value ~= default then
      fields[#fields + 1] = nf(n.id, field)
      fields[#fields + 1] = value
    end
  end
  put('args', n.args, nil)
  put('deps', n.deps, 0)
  if n.dependents and #n.dependents > 0 then
    put('dependents', cjson.encode(n.dependents), nil)
  end
  put('retries', n.retries, 0)
  put('backoffMs', n.backoffMs, 200)
  put('timeoutMs', n.timeoutMs, 0)
  put('onFailure', n.onFailure, 'fail')
  put('weight', n.weight, '1')
  redis.call('HSET', keys.task, unpack(fields))
end

-- The pending input requests of a task as one JSON object text, built from the stored texts of
-- each request (`ask/<key>`: no node id holds a `/`, so readers of the nodes never take it for
-- one) without decoding them: cjson would turn an empty array in a schema into an object.
-- `owners` maps each pending key to the node that asked.
local function pending_requests(task, owners)
  local keys = {}
  for key in pairs(owners) do
    keys[#keys + 1] = key
  end
  table.sort(keys)
  local parts = {}
  for _, key in ipairs(keys) do
    parts[#parts + 1] = cjson.encode(key) .. ':' .. (redis.call('HGET', task, 'ask/' .. key) or 'null')
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- Every node's outcome in a DAG task, as the JSON object text of a result's
-- `structuredContent.nodes`: status, attempts, duration, the error of a failed node and (with
-- `with_outputs`) the output of a completed one (their stored texts, not decoded). Fields of input
-- requests (`ask/...`, `answer/...`) hold a `/`, which no node id does, and are left out.
local function node_outcomes(task, with_outputs)
  local fields = redis.call('HGETALL', task)
  local nodes, order = {}, {}
  for i = 1, #fields, 2 do
    local node, field = string.match(fields[i], '^([^:/]+):([^:]+)$')
    if node then
      if not nodes[node] then
        nodes[node] = {}
        order[#order + 1] = node
      end
      nodes[node][field] = fields[i + 1]
    end
  end
  table.sort(order)
  local parts = {}
  for _, id in ipairs(order) do
    local n = nodes[id]
    if n.status then
      local duration = 'null'
      if n.startedAt and n.finishedAt then
        duration = tostring(math.max(0, tonumber(n.finishedAt) - tonumber(n.startedAt)))
      end
      local item = '"status":' .. cjson.encode(n.status) .. ',"attempts":' .. (n.attempt or '0') ..
        ',"durationMs":' .. duration
      if with_outputs and n.status == 'completed' and n.output then
        item = item .. ',"output":' .. n.output
      elseif n.error then
        item = item .. ',"error":' .. n.error
      end
      parts[#parts + 1] = cjson.encode(id) .. ':{' .. item .. '}'
    end
  end
  return '{' .. table.concat(parts, ',') .. '}'
end
