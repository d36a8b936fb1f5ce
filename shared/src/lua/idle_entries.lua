-- idle_entries: the maintenance holder looks, in one step per shard, for work entries that have
-- gone unrenewed for a lease: a running attempt renews its entry three times per lease, so an
-- entry idle that long is run by nobody, whether its holder died, hung, or is alive and merely
-- failed to start it, hand it back or finish with it. Nothing is claimed here: each entry found is
-- queued again by reclaim_node, which checks again, atomically, that it is still that idle.
--
-- KEYS the shard's work streams to look at
-- ARGV[1] the record (MessagePack): idleMs (how long an entry must have gone unrenewed), count (most
--   entries per stream), holder (only this consumer's entries; "" for any consumer's)
-- Returns JSON: {"entries": [{stream, entry, holder, idleMs, task, node, trace}] (task and node ""
--   for an entry that names none, or that is no longer in its stream), "full": bool (a stream had
--   more than count such entries), "nextInMs": with a holder, how long until the next of its
--   entries looked at goes unrenewed for idleMs (null when none is left)}
local r = cmsgpack.unpack(ARGV[1])
local found = {}
local full = false
local next_in = nil
local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then
      return fields[i + 1]
    end
  end
  return ''
end
for _, stream in ipairs(KEYS) do
  local args = {'XPENDING', stream, GROUP, 'IDLE', r.idleMs, '-', '+', r.count}
  if r.holder ~= '' then
    args[#args + 1] = r.holder
  end
  -- A stream or group that does not exist yet holds nothing.
  local ok, idle = pcall(redis.call, unpack(args))
  if ok then
    if #idle >= r.count then
      full = true
    end
    for _, p in ipairs(idle) do
      local entry = {stream = stream, entry = p[1], holder = p[2], idleMs = p[3], task = '', node = '', trace = ''}
      local at = redis.call('XRANGE', stream, p[1], p[1])
      if at[1] then
        local fields = at[1][2]
        entry.task, entry.node, entry.trace = field(fields, 'task'), field(fields, 'node'), field(fields, 'trace')
      end
      found[#found + 1] = entry
    end
    if r.holder ~= '' and #idle < r.count then
      -- When the holder's next entry comes due, from those it holds first.
      local pending = redis.call('XPENDING', stream, GROUP, '-', '+', r.count, r.holder)
      for _, p in ipairs(pending) do
        local left = r.idleMs - p[3]
        if left > 0 and (not next_in or left < next_in) then
          next_in = left
        end
      end
    end
  end
end
local reply = {entries = found, full = full, nextInMs = cjson.null}
if #found == 0 then
  reply.entries = cjson.null
end
if next_in then
  reply.nextInMs = next_in
end
return cjson.encode(reply)
