-- read_task: whether and how a reader may read one task, and what it may read, without reading
-- anything large. Nothing here changes the task: the only write is the caller's poll gate.
--
-- In order: the poll gate (a reader it refuses reads nothing), then whether the task is there and
-- the reader's to see (another owner's task, or a synchronous call's hidden one, is not read),
-- then whether it changed since the version the reader shows, then the size of what is large
-- (the large fields asked for, and with `nodes` each node's fields but its arguments and output).
-- Over the reader's allowance only that size comes back, so that the reader holds memory for it
-- before it reads. Within it, the small fields come back, and the names of the node fields to
-- read: the caller reads those and the large fields with plain HMGETs (and measures again what it
-- got). Large values never pass through Lua, which would copy each one (and collect it later)
-- while every other client waits.
--
-- KEYS[1] task hash   KEYS[2] the caller's gate for this read (only with gapMs > 0)
-- ARGV[1] the record (MessagePack):
--   gapMs      shortest time between two gated reads (0: no gate)
--   token      this read's token in the gate: the same read sent again passes its own gate
--   owner      the owner the reader may see ("" any)
--   hidden     a synchronous call's hidden task is read too
--   small      fields read whatever their size (status and times)
--   large      fields read only within the allowance
--   nodes      the nodes are read too
--   allowance  bytes the large fields and the nodes may take
--   since      a version the reader has shown ("" none): a task still at it is not read again
-- Returns an array whose first element names the outcome:
--   {'soon', retryAfterMs}   {'missing'}   {'other'}   {'same', version}
--   {'over', bytes, version}
--   {'fits', bytes, version, {small values}, {node fields to read}, {node, output size, ...}}
local r = cmsgpack.unpack(ARGV[1])
if (r.gapMs or 0) > 0 then
  local earlier = redis.call('SET', KEYS[2], r.token, 'NX', 'PX', r.gapMs, 'GET')
  if earlier and earlier ~= r.token then
    return {'soon', math.max(redis.call('PTTL', KEYS[2]), 1)}
  end
end
local head = redis.call('HMGET', KEYS[1], 'status', 'owner', 'mode', 'createdAt', 'ttlMs', 'updatedAt')
if not head[1] then
  return {'missing'}
end
-- An unsettled task past its TTL is gone (its expiry is due); a settled one is there as long as its
-- keys are: one that settled at or after its TTL is kept a grace after it settled (`settle`).
local created, ttl = tonumber(head[4]), tonumber(head[5])
if created and ttl and created + ttl <= redis_now() and is_live(head[1]) then
  return {'missing'}
end
if head[3] == 'sync' and not r.hidden then
  return {'missing'}
end
if r.owner ~= '' and head[2] ~= r.owner then
  return {'other'}
end
-- What tells one state of the task from the next: every transition moves its status, its update
-- time or the number of its fields (a node that starts, finishes or fails adds fields).
local version = head[1] .. '/' .. (head[6] or '') .. '/' .. redis.call('HLEN', KEYS[1])
if (r.since or '') ~= '' and r.since == version then
  return {'same', version}
end

-- Node fields a reader shows: every one but the arguments, the output and the bookkeeping of
-- queues and leases. Those whose size varies are measured; the others (a status, a count, a time,
-- a tool or worker name) are counted at SMALL bytes each, which costs no command per field.
local SHOWN = {status = 'small', attempt = 'small', tool = 'small', worker = 'small',
  startedAt = 'small', finishedAt = 'small', error = 'sized', dependents = 'sized'}
local SMALL = 128
local large = r.large or {}
local bytes = 0
for _, field in ipairs(large) do
  bytes = bytes + redis.call('HSTRLEN', KEYS[1], field)
end
local node_fields, outputs = {}, {}
if r.nodes then
  for _, key in ipairs(redis.call('HKEYS', KEYS[1])) do
    local node, field = string.match(key, '^(.*):([^:]*)$')
    -- Fields of input requests (`ask/KEY`) hold a `/`, which no node id does.
    if node and not string.find(node, '/', 1, true) then
      local shown = SHOWN[field]
      if shown then
        node_fields[#node_fields + 1] = key
        if shown == 'sized' then
          bytes = bytes + #key + redis.call('HSTRLEN', KEYS[1], key)
        else
          bytes = bytes + #key + SMALL
        end
      elseif field == 'output' then
        outputs[#outputs + 1] = node
        outputs[#outputs + 1] = redis.call('HSTRLEN', KEYS[1], key)
      end
    end
  end
end
if bytes > (r.allowance or 0) then
  return {'over', bytes, version}
end

return {'fits', bytes, version, redis.call('HMGET', KEYS[1], unpack(r.small)), node_fields, outputs}
