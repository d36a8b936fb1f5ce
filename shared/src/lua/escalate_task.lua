-- escalate_task: the hidden task of a synchronous call becomes the client's task, which it can
-- fetch, follow and cancel like any other. Two things escalate a call:
--  - its tool, saying that the rest of its work runs as a task (after gathering input through
--    MRTR rounds, say): only a call created as escalable changes, fenced by the tool's attempt,
--    and the waiting gateway answers the call with the task instead of the result;
--  - its gateway, whose wait for the call ran out (CONVEYOR_SYNC_TIMEOUT_MS, `overdue`): any live
--    synchronous call changes, and the gateway answers the call with the task (or an error naming
--    it), instead of leaving the work to run on out of the caller's reach.
-- An escalated task is marked (`escalated`), so that a repeat (its reply was lost, or the other of
-- the two escalates it too) answers "escalated" again: the call is a task, whoever made it one.
-- Its owner's index lists it (create indexed an escalable call already).
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] the owner's task index (overdue only)
-- ARGV[1] the record (MessagePack): task, message (the new status message; "" keeps it), and
--   either node and attempt (the tool's), or overdue (true) and retention (ms the owner's index
--   is kept at least)
-- Returns JSON: {"outcome": "escalated" (now or before) | "unchanged" (a call the tool may not
--   escalate, or one that is over) | "stale" (the tool's attempt is not the node's running one)
--   | "terminal" (overdue: the call is over) | "missing" (overdue: no such task)}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local t
if r.overdue then
  local v = redis.call('HMGET', KEYS[1], 'status', 'mode', 'escalated', 'waiters', 'createdAt')
  t = {status = v[1], mode = v[2], escalated = v[3], waiters = v[4], createdAt = v[5]}
  if not t.status then
    return cjson.encode({outcome = 'missing'})
  end
else
  local n = node_state(KEYS[1], r.node, {'status', 'mode', 'escalable', 'escalated', 'waiters'})
  if n.status ~= 'running' or n.attempt ~= r.attempt then
    return cjson.encode({outcome = 'stale'})
  end
  t = n.task
end
if t.escalated == '1' then
  return cjson.encode({outcome = 'escalated'})
end
if not is_live(t.status) then
  if r.overdue then
    return cjson.encode({outcome = 'terminal'})
  end
  return cjson.encode({outcome = 'unchanged'})
end
if t.mode ~= 'sync' then
  -- A task from the start: the client has it already, but its tool never escalated it.
  if r.overdue then
    return cjson.encode({outcome = 'escalated'})
  end
  return cjson.encode({outcome = 'unchanged'})
end
if not r.overdue and t.escalable ~= '1' then
  return cjson.encode({outcome = 'unchanged'})
end
local message = r.message
local fields = {'mode', 'task', 'escalated', '1', 'updatedAt', now}
if message ~= '' then
  fields[#fields + 1] = 'statusMessage'
  fields[#fields + 1] = message
else
  message = redis.call('HGET', KEYS[1], 'statusMessage') or ''
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HDEL', KEYS[1], 'escalable')
if r.overdue then
  redis.call('ZADD', KEYS[2], tonumber(t.createdAt), r.task)
  if redis.call('PTTL', KEYS[2]) < r.retention then
    redis.call('PEXPIRE', KEYS[2], r.retention)
  end
end
notify(KEYS[1], '{"task":' .. cjson.encode(r.task) .. ',"type":"status","status":"' .. t.status ..
  '","message":' .. cjson.encode(message) .. ',"escalated":true}', t.waiters)
return cjson.encode({outcome = 'escalated'})
