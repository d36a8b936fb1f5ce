-- create_calls: a gateway creates a batch of lean calls of one shard in one step (ADR-0028): each
-- a synchronous call of one tool whose stream entry carries what its worker runs, so that its
-- delivery is its start. Runs without the prelude (only remember_call.lua goes in front), with
-- positional arguments: no record is decoded, and each call's fields are built once, in Rust
-- (store/lean.rs), as today's single call's.
--
-- Each call's task hash arrives written: the gateway sends its fields with a plain HSET in the
-- same pipeline, just before this script (a field passed through Lua costs about twice what a
-- command's argument does). Its id is new (a random id this gateway made), so nothing else names
-- the hash yet; this script adds the fields only Redis knows (its clock, the entry's id), or
-- deletes the hash of a call it refuses.
--
-- KEYS[1] load hash   KEYS[2] expiring zset, then for each call: its task hash, its work stream,
--   and its call key when it has one
-- ARGV[1] number of calls   ARGV[2] the shard's cancel channel (wakes its maintenance)
-- ARGV[3..6] this shard's shares of the limits: stored bytes per principal, live tasks per
--   principal, nodes per principal, queued nodes (-1: none)   ARGV[7] queued nodes per tool
-- then for each call, in order: task id, owner, tool, traceparent (or empty), the entry's `lean`
--   field (its tool, owner and call record in one word, model.rs's LeanEntry::packed), ttl (ms),
--   has call key (1 | 0). What a call stores from the start is its call record, whose length is
--   the `lean` field's less the lengths of its tool, its owner and their headers. Its entry is built here from these
--   (its node is the root, model.rs's ROOT_NODE), under field names that are this script's
--   constants (interned once, not passed with every call): what a worker of the previous version
--   reads (task, node, trace), and what a lean worker runs (lean).
-- Each call is checked in order against the limits, counting the calls before it. A call that
-- does not fit is not kept: its gateway creates it by the full path (create_task), which refuses
-- it with the limit's figures or spreads it to another shard.
-- Returns an array: the creation time (Redis's clock, ms), then one outcome per call: "created",
-- or the name of the limit it would pass.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count = tonumber(ARGV[1])
local channel = ARGV[2]
local lim_kept, lim_live, lim_nodes, lim_queued, lim_tool =
  tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local load = KEYS[1]
-- prelude's (the expiring index stays a skip list)
local INDEX_PIN = '~ this member keeps the index a skip list: inserting into a listpack scans all of it'
local INDEX_PIN_SCORE = 100000000000000

-- Where each call's words start, and its keys.
-- How many decimal digits `n` takes (a length in a `lean` field's header).
local function digits(n)
  local d = 1
  while n >= 10 do
    n = math.floor(n / 10)
    d = d + 1
  end
  return d
end
local calls = {}
local a, k = 8, 3
for i = 1, count do
  local c = {id = ARGV[a], owner = ARGV[a + 1], tool = ARGV[a + 2], trace = ARGV[a + 3], lean = ARGV[a + 4],
    ttl = tonumber(ARGV[a + 5])}
  c.bytes = #c.lean - (digits(#c.tool) + #c.tool + digits(#c.owner) + #c.owner + 2)
  c.task, c.stream = KEYS[k], KEYS[k + 1]
  k = k + 2
  local has_call_key = ARGV[a + 6] == '1'
  a = a + 7
  if has_call_key then
    c.callKey = KEYS[k]
    k = k + 1
  end
  calls[i] = c
end

-- The load of every owner and tool of the batch, in one read.
local fields = {'queued', 'wake', 'idleEvery', 'keptMax'}
local owners, tools = {}, {}
for _, c in ipairs(calls) do
  if not owners[c.owner] then
    owners[c.owner] = {}
    for _, f in ipairs({'live:', 'nodes:', 'kept:', 'full:'}) do
      fields[#fields + 1] = f .. c.owner
    end
  end
  if lim_tool >= 0 and not tools[c.tool] then
    tools[c.tool] = {}
    fields[#fields + 1] = 'queued:' .. c.tool
  end
end
local values = redis.call('HMGET', load, unpack(fields))
local read = {}
for i, f in ipairs(fields) do
  read[f] = values[i]
end
local queued = tonumber(read.queued or '0') or 0
for owner, o in pairs(owners) do
  o.live = tonumber(read['live:' .. owner] or '0') or 0
  o.held = o.live + (tonumber(read['nodes:' .. owner] or '0') or 0)
  o.kept = tonumber(read['kept:' .. owner] or '0') or 0
  o.full = read['full:' .. owner]
  o.added, o.bytes = 0, 0
end
for tool, q in pairs(tools) do
  q.queued = tonumber(read['queued:' .. tool] or '0') or 0
end
local idle_every = tonumber(read.idleEvery or '0') or 0
-- The share of stored bytes a lean call is settled under (complete_calls reads it once a batch,
-- not from each task): the one its gateway admits it under, stated once it changes.
if read.keptMax ~= ARGV[3] then
  redis.call('HSET', load, 'keptMax', ARGV[3])
end

local outcomes = {now}
-- A number passed to a command is formatted with printf's `%.17g`: each expiry is formatted once
-- per TTL of the batch, as text.
local expiry_texts = {}
local created, by_tool, expiring = 0, {}, {}
local due = nil
local now_text = tostring(now)
for i, c in ipairs(calls) do
  local o = owners[c.owner]
  local q = tools[c.tool]
  local outcome = 'created'
  if lim_kept >= 0 and (o.kept + c.bytes > lim_kept or o.full) then
    outcome = 'stored_bytes_per_principal'
  elseif lim_live >= 0 and o.live + 1 > lim_live then
    outcome = 'live_tasks_per_principal'
  elseif lim_nodes >= 0 and o.held + 1 > lim_nodes then
    outcome = 'nodes_per_principal'
  elseif lim_queued >= 0 and queued + 1 > lim_queued then
    outcome = 'queued_nodes'
  elseif q and string.sub(c.tool, 1, 1) ~= '$' and q.queued + 1 > lim_tool then
    outcome = 'queued_nodes_per_tool'
  end
  if outcome ~= 'created' then
    redis.call('DEL', c.task)
  else
    local entry = redis.call('XADD', c.stream, '*', 'task', c.id, 'node', 'root', 'trace', c.trace, 'lean', c.lean)
    redis.call('HSET', c.task, 'createdAt', now_text, 'updatedAt', now_text, 'root:entry', entry)
    if c.callKey then
      remember_call(c.callKey, c.id, c.ttl)
    end
    o.live, o.held, o.kept = o.live + 1, o.held + 1, o.kept + c.bytes
    o.added, o.bytes = o.added + 1, o.bytes + c.bytes
    queued = queued + 1
    if q then
      q.queued = q.queued + 1
    end
    by_tool[c.tool] = (by_tool[c.tool] or 0) + 1
    created = created + 1
    local at_text = expiry_texts[c.ttl]
    if not at_text then
      at_text = tostring(now + c.ttl)
      expiry_texts[c.ttl] = at_text
    end
    expiring[#expiring + 1] = at_text
    expiring[#expiring + 1] = c.id
    -- The maintenance looks at the task at its TTL, and, while it lives, for entries a worker
    -- left unrenewed at least as often as the maintenance holder asked (create_task does the same).
    local at = now + c.ttl
    if idle_every > 0 and idle_every < c.ttl then
      at = now + idle_every
    end
    if not due or at < due then
      due = at
    end
  end
  outcomes[i + 1] = outcome
end
if created == 0 then
  return outcomes
end
for owner, o in pairs(owners) do
  if o.added > 0 then
    redis.call('HINCRBY', load, 'live:' .. owner, o.added)
    redis.call('HINCRBY', load, 'kept:' .. owner, o.bytes)
  end
end
redis.call('HINCRBY', load, 'queued', created)
for tool, n in pairs(by_tool) do
  redis.call('HINCRBY', load, 'queued:' .. tool, n)
end
expiring[#expiring + 1] = INDEX_PIN_SCORE
expiring[#expiring + 1] = INDEX_PIN
redis.call('ZADD', KEYS[2], unpack(expiring))
local planned = tonumber(read.wake)
if not planned or due < planned then
  redis.call('HSET', load, 'wake', due)
  redis.call('SPUBLISH', channel, '$maintain')
end
return outcomes
