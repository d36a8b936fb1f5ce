-- complete_calls: a worker completes a batch of lean attempts of one shard in one step (ADR-0028):
-- attempts that ran straight from their delivery, never adopted, and ended with a result (a tool
-- error included). Runs without the prelude, with positional arguments: each result is stored as
-- the worker sent it, and each waiter's event is the text the worker built; Lua decodes neither.
--
-- An attempt is fenced by its entry: its node must still be queued with that entry bound to it
-- (an adoption or a takeover moved it on otherwise).
--
-- KEYS[1] load hash   KEYS[2] expiring zset   KEYS[3] kept zset, then for each attempt: its task
--   hash, its work stream
-- ARGV[1] number of attempts, then for each, in order: task id, entry, owner, tool, status
--   ("completed", or "failed" for a tool error on the 2025-11-25 wire), status message, result
--   (JSON text), event (the status event its waiters get, JSON text), the worker that ran it
-- Returns an array, one outcome per attempt: "settled" | "stale" (nothing changed) | "dropped"
--   (the task is gone or over: the entry is acknowledged, nothing stored) | "adopt" (the result
--   would pass its owner's share of stored bytes: nothing changed; the worker completes it by the
--   full path, which fails it with an error that says so)
local GROUP = 'workers'
local SETTLED_GRACE_MS = 30000 -- prelude's
local KEPT_BUCKET_MS = 100 -- prelude's (keep_until: the kept index's buckets)
-- prelude's (the kept index stays a skip list)
local INDEX_PIN = '~ this member keeps the index a skip list: inserting into a listpack scans all of it'
local INDEX_PIN_SCORE = 100000000000000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A number passed to a command, or joined into a string, is formatted with printf's `%.17g` (a
-- tenth of this script's instructions once): each is formatted once, as text.
local now_text = tostring(now)
local count = tonumber(ARGV[1])
local load, expiring, kept_index = KEYS[1], KEYS[2], KEYS[3]

local owners, owner_fields = {}, {}
for i = 1, count do
  local owner = ARGV[2 + 9 * (i - 1) + 2]
  if not owners[owner] then
    owners[owner] = {ended = 0, bytes = 0}
    owner_fields[#owner_fields + 1] = 'kept:' .. owner
  end
end
-- The shard's share of an owner's stored bytes, as its gateways admit lean calls under it
-- (create_calls states it in the load hash; -1: none).
owner_fields[#owner_fields + 1] = 'keptMax'
local held = redis.call('HMGET', load, unpack(owner_fields))
local share = tonumber(held[#owner_fields] or '-1') or -1
for i = 1, #owner_fields - 1 do
  owners[string.sub(owner_fields[i], 6)].kept = tonumber(held[i] or '0') or 0
end

local outcomes = {}
local acks, ended, kept, buckets, by_tool, events, channels = {}, {}, {}, {}, {}, {}, {}
local function ack(stream, entry)
  if not acks[stream] then
    acks[stream] = {}
  end
  local list = acks[stream]
  list[#list + 1] = entry
end
local function tell(channel, event)
  if not events[channel] then
    events[channel] = {}
    channels[#channels + 1] = channel
  end
  local list = events[channel]
  list[#list + 1] = event
end
-- Numbers read as text and times written as text, each converted once a batch (a conversion
-- costs about as much as a command's argument).
local numbers, texts, single_waiter = {}, {}, {}
local function number_of(text)
  local n = numbers[text]
  if not n then
    n = tonumber(text) or 0
    numbers[text] = n
  end
  return n
end
local function text_of(n)
  local text = texts[n]
  if not text then
    text = string.format('%d', n)
    texts[n] = text
  end
  return text
end
for i = 1, count do
  local a = 2 + 9 * (i - 1)
  local id, entry, owner, tool, status, message, result, event, worker =
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8]
  local task, stream = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local f = redis.call('HMGET', task, 'status', 'root:status', 'root:entry', 'waiters', 'bytes')
  local o = owners[owner]
  local outcome = 'settled'
  if not f[1] then
    outcome = 'dropped'
    ack(stream, entry)
  elseif f[2] ~= 'queued' or f[3] ~= entry then
    outcome = 'stale'
  elseif f[1] ~= 'working' and f[1] ~= 'input_required' then
    outcome = 'dropped'
    ack(stream, entry)
  else
    if share >= 0 and o.kept + #result > share then
      outcome = 'adopt'
    end
  end
  if outcome == 'settled' then
    local total = number_of(f[5] or '0') + #result
    local bytes = string.format('%d', total)
    o.kept = o.kept + #result
    redis.call('HSET', task, 'root:status', 'completed', 'root:finishedAt', now_text, 'root:worker', worker, 'status',
      status, 'statusMessage', message, 'updatedAt', now_text, 'result', result, 'bytes', bytes)
    local waited = f[4] and f[4] ~= '' and f[4] ~= '[]'
    -- prelude's settled_expiry for a synchronous call (every lean call is one): its hidden task
    -- goes a grace after it settles, sooner only when its TTL runs out first and nobody waits
    -- (then, and only then, its creation and TTL are read).
    local expires = now + SETTLED_GRACE_MS
    if not waited then
      local t = redis.call('HMGET', task, 'createdAt', 'ttlMs')
      local until_ttl = tonumber(t[1]) + tonumber(t[2])
      if until_ttl > now and until_ttl < expires then
        expires = until_ttl
      end
    end
    redis.call('PEXPIREAT', task, text_of(expires))
    -- The bytes it keeps go back when its keys go: in its owner's bucket of the kept index (the
    -- calls of a batch mostly share one, whose member is named once).
    local bucket = math.floor(expires / KEPT_BUCKET_MS)
    local named = o.members
    if not named then
      named = {}
      o.members = named
    end
    local member = named[bucket]
    if not member then
      member = string.format('%d', bucket) .. '\t' .. owner
      named[bucket] = member
    end
    if not kept[member] then
      kept[member] = 0
      buckets[#buckets + 1] = string.format('%d', (bucket + 1) * KEPT_BUCKET_MS)
      buckets[#buckets + 1] = member
    end
    kept[member] = kept[member] + total
    ack(stream, entry)
    ended[#ended + 1] = id
    o.ended = o.ended + 1
    o.bytes = o.bytes + #result
    by_tool[tool] = (by_tool[tool] or 0) + 1
    if waited then
      -- One waiter (the call's gateway) is the usual case: its channel is read without a decode,
      -- once a batch.
      local single = single_waiter[f[4]]
      if single == nil then
        single = string.match(f[4], '^%["([^",\\]*)"%]$') or false
        single_waiter[f[4]] = single
      end
      if single then
        tell(single, event)
      else
        for _, channel in ipairs(cjson.decode(f[4])) do
          tell(channel, event)
        end
      end
    end
  end
  outcomes[i] = outcome
end

for stream, entries in pairs(acks) do
  redis.call('XACK', stream, GROUP, unpack(entries))
  redis.call('XDEL', stream, unpack(entries))
end
if #ended == 0 then
  return outcomes
end
redis.call('ZREM', expiring, unpack(ended))
buckets[#buckets + 1] = string.format('%d', INDEX_PIN_SCORE)
buckets[#buckets + 1] = INDEX_PIN
redis.call('ZADD', kept_index, unpack(buckets))
for member, bytes in pairs(kept) do
  redis.call('HINCRBY', load, 'keptAt:' .. member, string.format('%d', bytes))
end
-- A per-owner or per-tool count that reaches zero leaves the load hash (prelude's count_down).
local function count_down(field, by)
  if redis.call('HINCRBY', load, field, string.format('%d', -by)) == 0 then
    redis.call('HDEL', load, field)
  end
end
for owner, o in pairs(owners) do
  if o.ended > 0 then
    count_down('live:' .. owner, o.ended)
    redis.call('HINCRBY', load, 'kept:' .. owner, string.format('%d', o.bytes))
  end
end
redis.call('HINCRBY', load, 'queued', string.format('%d', -#ended))
for tool, n in pairs(by_tool) do
  count_down('queued:' .. tool, n)
end
for _, channel in ipairs(channels) do
  local list = events[channel]
  if #list == 1 then
    redis.call('SPUBLISH', channel, list[1])
  else
    redis.call('SPUBLISH', channel, '[' .. table.concat(list, ',') .. ']')
  end
end
return outcomes
