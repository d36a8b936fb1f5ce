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
--   the `lean` field's less the lengths of its tool, its owner and their headers. Its entry is
--   built here from these (its node is the root, model.rs's ROOT_NODE), under field names that are
--   this script's constants (interned once, not passed with every call): what a worker of the
--   previous version reads (task, node, trace), and what a lean worker runs (lean).
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
-- A number passed to a command is formatted with printf's `%.17g`; counts and times go as text
-- made with `%d`.
local INDEX_PIN_SCORE_TEXT = string.format('%d', INDEX_PIN_SCORE)

-- How many decimal digits `n` takes (a length in a `lean` field's header).
local function digits(n)
  local d = 1
  while n >= 10 do
    n = math.floor(n / 10)
    d = d + 1
  end
  return d
end

-- Where each call's words and keys start (its words are read from ARGV where they are: a table
-- a call would cost more than the reads), and the load of every owner and tool of the batch, in
-- one read.
local word_at, key_at, has_call_key = {}, {}, {}
local fields = {'queued', 'wake', 'idleEvery', 'keptMax'}
local owners, tools = {}, {}
local a, k = 8, 3
for i = 1, count do
  word_at[i], key_at[i] = a, k
  local owner, tool = ARGV[a + 1], ARGV[a + 2]
  has_call_key[i] = ARGV[a + 6] == '1'
  a = a + 7
  k = k + 2
  if has_call_key[i] then
    k = k + 1
  end
  if not owners[owner] then
    owners[owner] = {}
    for _, f in ipairs({'live:', 'nodes:', 'kept:', 'full:'}) do
      fields[#fields + 1] = f .. owner
    end
  end
  if lim_tool >= 0 and not tools[tool] then
    tools[tool] = {}
    fields[#fields + 1] = 'queued:' .. tool
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
-- A TTL as a number, converted once per text.
local ttl_numbers = {}
for i = 1, count do
  a, k = word_at[i], key_at[i]
  local id, owner, tool, trace, lean, ttl_text =
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
  local task, stream = KEYS[k], KEYS[k + 1]
  local ttl = ttl_numbers[ttl_text]
  if not ttl then
    ttl = tonumber(ttl_text)
    ttl_numbers[ttl_text] = ttl
  end
  local bytes = #lean - (digits(#tool) + #tool + digits(#owner) + #owner + 2)
  local o = owners[owner]
  local q = tools[tool]
  local outcome = 'created'
  if lim_kept >= 0 and (o.kept + bytes > lim_kept or o.full) then
    outcome = 'stored_bytes_per_principal'
  elseif lim_live >= 0 and o.live + 1 > lim_live then
    outcome = 'live_tasks_per_principal'
  elseif lim_nodes >= 0 and o.held + 1 > lim_nodes then
    outcome = 'nodes_per_principal'
  elseif lim_queued >= 0 and queued + 1 > lim_queued then
    outcome = 'queued_nodes'
  elseif q and string.sub(tool, 1, 1) ~= '$' and q.queued + 1 > lim_tool then
    outcome = 'queued_nodes_per_tool'
  end
  if outcome ~= 'created' then
    redis.call('DEL', task)
  else
    local entry = redis.call('XADD', stream, '*', 'task', id, 'node', 'root', 'trace', trace, 'lean', lean)
    redis.call('HSET', task, 'createdAt', now_text, 'updatedAt', now_text, 'root:entry', entry)
    if has_call_key[i] then
      remember_call(KEYS[k + 2], id, ttl)
    end
    o.live, o.held, o.kept = o.live + 1, o.held + 1, o.kept + bytes
    o.added, o.bytes = o.added + 1, o.bytes + bytes
    queued = queued + 1
    if q then
      q.queued = q.queued + 1
    end
    by_tool[tool] = (by_tool[tool] or 0) + 1
    created = created + 1
    local at_text = expiry_texts[ttl]
    if not at_text then
      at_text = string.format('%d', now + ttl)
      expiry_texts[ttl] = at_text
    end
    expiring[#expiring + 1] = at_text
    expiring[#expiring + 1] = id
    -- The maintenance looks at the task at its TTL, and, while it lives, for entries a worker
    -- left unrenewed at least as often as the maintenance holder asked (create_task does the same).
    local at = now + ttl
    if idle_every > 0 and idle_every < ttl then
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
    redis.call('HINCRBY', load, 'live:' .. owner, string.format('%d', o.added))
    redis.call('HINCRBY', load, 'kept:' .. owner, string.format('%d', o.bytes))
  end
end
redis.call('HINCRBY', load, 'queued', string.format('%d', created))
for tool, n in pairs(by_tool) do
  redis.call('HINCRBY', load, 'queued:' .. tool, string.format('%d', n))
end
expiring[#expiring + 1] = INDEX_PIN_SCORE_TEXT
expiring[#expiring + 1] = INDEX_PIN
redis.call('ZADD', KEYS[2], unpack(expiring))
local planned = tonumber(read.wake)
if not planned or due < planned then
  redis.call('HSET', load, 'wake', due)
  redis.call('SPUBLISH', channel, '$maintain')
end
return outcomes
