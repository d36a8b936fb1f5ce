-- create_task: write a new task and its nodes, index it, and queue the nodes that depend on
-- nothing, after checking its idempotency key and the shard's load limits. Runs before the
-- client gets its create result, so tasks/get on the returned id always resolves.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] expiring zset
-- KEYS[4] the owner's task index   KEYS[5 .. 4+Q] the work stream of each of the task's queues,
-- in the order of record.queues   KEYS[5+Q] the idempotency key, when record.idem is true
-- KEYS[#KEYS] the call key (a synchronous call by its request id), when record.callKey is true
-- ARGV[1] the record (MessagePack): id, owner, tool, call (the call record as JSON text: stored as it
--   is, never decoded here), ttl, trace, mode ("task" | "sync"), index (bool), message, retention
--   (ms of owner index kept), kind ("single" | "dag"), output, queues, nodes (each: id, tool, args
--   (absent for a single call's node: it runs with the call's), q, deps, dependents, retries,
--   backoffMs, timeoutMs, onFailure, weight), waiter (inbox channel or ""), idem (bool),
--   fingerprint, idemTtl, limits {queued, perTool, live, nodes, kept} (this shard's shares; -1:
--   none; kept: of the stored bytes of each principal), answers (JSON text
--   of answers the call came with, for a single call's node, or ""), escalable (bool: a
--   synchronous call that its tool may turn into the client's task), callKey (bool: KEYS ends with
--   the call key), maxBytes, bytes (what the task stores from the start: its call, its nodes'
--   arguments, its answers), cancelChannel (the shard's: wakes its maintenance when this
--   task's expiry is the shard's next due item), planLimits (a single call's: what a graph its tool
--   plans is held to, "maxNodes maxNodeBytes nodesShare queuedShare perToolShare", stored for
--   expand_plan; "" for a graph), claim (with idem: when the shard's limits refuse the task, the
--   idempotency key is claimed for its creation in another shard, as "<claim>@<now> <fingerprint>";
--   absent: no claim), hold (bool: the nodes without dependencies are counted as queued but get no
--   stream entry until release_task: a task made in another shard for a claimed key, which must not
--   run unless its claim resolves to it), roundsMax (absent, or for a synchronous call whose input
--   rounds are told to its client: the shard's share of its owner's parked rounds, -1 for none)
-- A single call's task hash holds only what scripts read (status, times, owner, tool, mode, trace,
-- queues, waiters) beside the call record and its node; a graph's adds its counts.
-- Returns JSON: {"outcome":"created","createdAt":ms (Redis's clock)} | {"outcome":"exists"}
--   | {"outcome":"duplicate","task":id} | {"outcome":"claimed","claim":value,"ageMs":n} (another
--   create of the key claimed it and is making its task in another shard)
--   | {"outcome":"conflict","task":id} | {"outcome":"budget","size":n,"max":n} (the arguments alone
--   pass the task's byte budget)
--   | {"outcome":"limit","limit":name,"current":n,"max":n,"needed":n,"tool":name,"live":n,"nodes":n,
--   "queued":n,"kept":n,"oldest":[ids]?,"claim":value?} (needed: what this task would add to the
--   count; claim: the value this script claimed the idempotency key with)
--   (live, nodes: the owner's live tasks and the nodes they hold in this shard; queued: the
--   shard's queued nodes; kept: the bytes the owner keeps in this shard; oldest: with
--   stored_bytes_per_principal, the owner's oldest indexed tasks here, whose TTLs say when their
--   bytes come back)
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local keys = {task = KEYS[1], load = KEYS[2]}
local queue_count = #r.queues
local streams = {}
for i = 1, queue_count do
  streams[i] = KEYS[4 + i]
end
local idem_key = KEYS[5 + queue_count]
if r.idem then
  local earlier = redis.call('GET', idem_key)
  -- This very create's own claim (sent again after its reply was lost) is no one else's: it goes on
  -- as if the key were free, and either claims it again or takes it for its task.
  if earlier and r.claim and string.sub(earlier, 1, #r.claim + 1) == r.claim .. '@' then
    earlier = nil
  end
  if earlier then
    local task_id, fingerprint = string.match(earlier, '^(%S+) (.*)$')
    if string.sub(task_id, 1, 1) == '?' then
      -- Another create of this key found its shard full and is making its task in another one.
      local made = tonumber(string.match(task_id, '@(%d+)$') or '0') or 0
      return cjson.encode({outcome = 'claimed', claim = earlier, ageMs = math.max(now - made, 0)})
    end
    if fingerprint == r.fingerprint then
      return cjson.encode({outcome = 'duplicate', task = task_id})
    end
    return cjson.encode({outcome = 'conflict', task = task_id})
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return cjson.encode({outcome = 'exists'})
end
if r.maxBytes > 0 and r.bytes > r.maxBytes then
  return cjson.encode({outcome = 'budget', size = r.bytes, max = r.maxBytes})
end

local roots, roots_by_tool = root_counts(r.nodes)
-- Each limit is this shard's share of the deployment's (-1: none); the shares add up to the
-- configured figure, and a gateway refused here tries the other shards before it refuses the call.
local lim = r.limits
-- The load counts, and the shard's planned maintenance look, in one read.
local load = redis.call('HMGET', KEYS[2], 'live:' .. r.owner, 'queued', 'nodes:' .. r.owner, 'wake',
  'kept:' .. r.owner, 'full:' .. r.owner, 'idleEvery')
local planned = load[4]
do
  local live, queued = tonumber(load[1] or '0'), tonumber(load[2] or '0')
  local held = live + tonumber(load[3] or '0')
  local kept = tonumber(load[5] or '0')
  local function over(limit, current, max, needed, tool, oldest)
    local reply = {outcome = 'limit', limit = limit, current = current, max = max, needed = needed,
      tool = tool or '', live = live, nodes = held, queued = queued, kept = kept, oldest = oldest}
    if r.idem and r.claim then
      -- The caller tries the other shards: the key is claimed first, so that a concurrent retry of
      -- the call waits for this one's task instead of making one of its own.
      reply.claim = r.claim .. '@' .. now .. ' ' .. r.fingerprint
      redis.call('SET', idem_key, reply.claim, 'PX', r.idemTtl)
    end
    return cjson.encode(reply)
  end
  -- Over the share, or an output of the owner's did not fit since it last gave bytes back.
  if lim.kept >= 0 and (kept + r.bytes > lim.kept or load[6]) then
    -- The owner's oldest tasks here, for the caller to tell when their bytes come back.
    local oldest = redis.call('ZRANGE', KEYS[4], 0, 9)
    if #oldest == 0 then
      oldest = nil
    end
    return over('stored_bytes_per_principal', kept, lim.kept, r.bytes, nil, oldest)
  end
  if lim.live >= 0 and live + 1 > lim.live then
    return over('live_tasks_per_principal', live, lim.live, 1)
  end
  if lim.nodes >= 0 and held + #r.nodes > lim.nodes then
    return over('nodes_per_principal', held, lim.nodes, #r.nodes)
  end
  if lim.queued >= 0 and queued + roots > lim.queued then
    return over('queued_nodes', queued, lim.queued, roots)
  end
  if lim.perTool >= 0 then
    for tool, count in pairs(roots_by_tool) do
      local current = tonumber(redis.call('HGET', KEYS[2], 'queued:' .. tool) or '0')
      if string.sub(tool, 1, 1) ~= '$' and current + count > lim.perTool then
        return over('queued_nodes_per_tool', current, lim.perTool, count, tool)
      end
    end
  end
end

local weight_total = 0
for _, n in ipairs(r.nodes) do
  weight_total = weight_total + tonumber(n.weight)
end
local waiters = '[]'
if r.waiter ~= '' then
  waiters = cjson.encode({r.waiter})
end
local now_text = tostring(now)
local task_fields = {
  'status', 'working', 'statusMessage', r.message, 'createdAt', now_text, 'updatedAt', now_text, 'ttlMs', r.ttl,
  'owner', r.owner, 'tool', r.tool, 'call', r.call, 'traceparent', r.trace, 'mode', r.mode,
  'queues', cjson.encode(r.queues), 'waiters', waiters}
local function add(field, value)
  task_fields[#task_fields + 1] = field
  task_fields[#task_fields + 1] = value
end
if r.kind == 'dag' then
  add('kind', 'dag')
  add('outputNode', r.output)
  add('nodeCount', #r.nodes)
  add('nodesSettled', 0)
  add('weightTotal', weight_total)
  add('weightSettled', 0)
end
-- What the task stores from the start (its call, its nodes' arguments, the answers it came with)
-- is its owner's from now until its keys expire.
add('bytes', r.bytes)
redis.call('HINCRBY', KEYS[2], 'kept:' .. r.owner, r.bytes)
if r.maxBytes > 0 then
  add('maxBytes', r.maxBytes)
end
if lim.kept >= 0 then
  -- Every later transition that stores bytes of the owner's checks them against this share.
  add('keptMax', lim.kept)
end
if r.escalable then
  add('escalable', '1')
end
if r.hold then
  add('onHold', '1')
end
if r.roundsMax then
  -- A synchronous call whose rounds are told to its client: park_node counts it among its owner's
  -- parked rounds while it waits, against this share (-1: none).
  add('roundsMax', r.roundsMax)
end
if r.planLimits and r.planLimits ~= '' then
  add('planLimits', r.planLimits)
end
if r.answers ~= '' and #r.nodes == 1 then
  add(nf(r.nodes[1].id, 'answers'), r.answers)
end
redis.call('HINCRBY', KEYS[2], 'live:' .. r.owner, '1')
hold_nodes(KEYS[2], r.owner, #r.nodes - 1)
if #r.nodes == 1 then
  -- A single call: the task and its node in one write.
  write_node(keys, streams, r.id, r.nodes[1], r.trace, task_fields, r.hold)
else
  redis.call('HSET', KEYS[1], unpack(task_fields))
  for _, n in ipairs(r.nodes) do
    write_node(keys, streams, r.id, n, r.trace, nil, r.hold)
  end
end
redis.call('ZADD', KEYS[3], now + r.ttl, r.id, INDEX_PIN_SCORE, INDEX_PIN)
-- The shard's maintenance looks at its TTL, and, while the task lives, for entries of its that a
-- worker left unrenewed, at least as often as the maintenance holder asked (maintain.lua).
local due = now + r.ttl
local idle_every = tonumber(load[7] or '0') or 0
if idle_every > 0 and idle_every < r.ttl then
  due = now + idle_every
end
wake_maintenance(KEYS[2], r.cancelChannel, due, planned)
if r.index then
  redis.call('ZADD', KEYS[4], now, r.id)
  -- A task that asks for a shorter retention than the index has left (an operator's retry) neither
  -- trims nor shortens it: the index keeps what its longest-kept tasks asked for.
  if r.retention >= redis.call('PTTL', KEYS[4]) then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (now - r.retention))
    redis.call('PEXPIRE', KEYS[4], r.retention)
  end
end
if r.idem then
  redis.call('SET', idem_key, r.id .. ' ' .. r.fingerprint, 'PX', r.idemTtl)
end
if r.callKey then
  remember_call(KEYS[#KEYS], r.id, r.ttl)
end
return cjson.encode({outcome = 'created', createdAt = now})
