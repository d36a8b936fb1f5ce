-- reclaim_node: the shard's maintenance found a work entry that has gone unrenewed for its holder's
-- lease: the holder was killed, hung or cut off, or it is alive and failed to start the node, hand
-- it back or finish with it. The entry must still be that idle now: one renewed meanwhile belongs
-- to a running attempt and is left alone. If the entry is still its node's current one, the node is
-- queued again under a new entry (a running node, or a lean one, counts one more lost worker); the
-- old entry is acknowledged either way, so the holder, when it renews, learns that it lost the node.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] the entry's work stream
-- ARGV[1] the record (MessagePack): task, node, entry, trace, idleMs (how long the entry must have
--   gone unrenewed)
-- Returns JSON: {"outcome": "requeued" (with losses, and for a node that was running, lost: the
-- attempt its worker was running: tool, attempt, worker, startedMs) | "renewed" (the entry was
-- renewed since it was found: nothing changed) | "dropped" (with reason)}
local r = cmsgpack.unpack(ARGV[1])
local pending = redis.call('XPENDING', KEYS[3], GROUP, 'IDLE', r.idleMs, r.entry, r.entry, 1)
if #pending == 0 then
  if #redis.call('XPENDING', KEYS[3], GROUP, r.entry, r.entry, 1) > 0 then
    return cjson.encode({outcome = 'renewed'})
  end
  -- No longer pending: whoever held it acknowledged it meanwhile, and its node moved on.
  return cjson.encode({outcome = 'dropped', reason = 'no longer pending'})
end
local status = redis.call('HGET', KEYS[1], 'status')
local n = node_state(KEYS[1], r.node)
-- A lean entry (it carries the call: its `lean` field, or `call` in the first lean entries,
-- ADR-0028) started its node when it was delivered: its node, still queued, was running on the
-- lost holder.
local ran_lean = false
local read = redis.call('XRANGE', KEYS[3], r.entry, r.entry)
if read[1] then
  local fields = read[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'lean' or fields[i] == 'call' then
      ran_lean = true
    end
  end
end
ack(KEYS[3], r.entry)
if not status then
  return cjson.encode({outcome = 'dropped', reason = 'task no longer exists'})
end
if not is_current(n, r.entry) or (n.status ~= 'running' and n.status ~= 'queued') then
  return cjson.encode({outcome = 'dropped', reason = 'not the current entry of its node'})
end
if not is_live(status) then
  -- The task ended while its worker was lost: the node never runs again (a queued node of an
  -- ended task has already left the load counts).
  redis.call('HSET', KEYS[1], nf(r.node, 'status'), 'dropped')
  return cjson.encode({outcome = 'dropped', reason = 'task is ' .. status})
end
local losses = n.losses
local lost = nil
if n.status == 'running' then
  local was = redis.call('HMGET', KEYS[1], nf(r.node, 'worker'), nf(r.node, 'startedAt'))
  lost = {tool = n.tool, attempt = n.attempt, worker = was[1] or '', startedMs = tonumber(was[2] or '0')}
  losses = redis.call('HINCRBY', KEYS[1], nf(r.node, 'losses'), 1)
  -- The lost attempt spends no retry: losses have their own bound (the worker's max losses).
  redis.call('HINCRBY', KEYS[1], nf(r.node, 'untried'), 1)
  redis.call('HDEL', KEYS[1], nf(r.node, 'worker'))
  enqueue(KEYS[1], KEYS[3], KEYS[2], r.task, r.node, n.tool, r.trace)
else
  if ran_lean then
    -- The lost run had no attempt number (the node's next start is its first attempt), so it
    -- spends none; it counts as a lost worker all the same.
    lost = {tool = n.tool, attempt = 1, worker = pending[1][2], startedMs = tonumber(string.match(r.entry, '^%d+'))}
    losses = redis.call('HINCRBY', KEYS[1], nf(r.node, 'losses'), 1)
  end
  -- Read but never started (or started lean): it is still counted as queued, so only its entry
  -- is renewed.
  local entry = redis.call('XADD', KEYS[3], '*', 'task', r.task, 'node', r.node, 'trace', r.trace or '')
  redis.call('HSET', KEYS[1], nf(r.node, 'entry'), entry)
end
return cjson.encode({outcome = 'requeued', losses = losses, lost = lost})
