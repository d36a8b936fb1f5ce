-- notify_waiters: a running node tells the processes that follow its task something that is not
-- stored: a message it logged for the client (MCP `notifications/message`), or that the client's
-- stream may close now and be resumed later. Fenced like progress: a stale attempt or a task that
-- is over says nothing.
--
-- KEYS[1] task hash (it holds the nodes)
-- ARGV[1] the record (MessagePack): node, attempt, event (the inbox message as JSON text, built by the
--   caller: {"task": ..., "type": ..., ...})
-- Returns JSON: {"outcome": "recorded" | "refused"} (refused: task over, or a stale attempt)
local r = cmsgpack.unpack(ARGV[1])
local state = redis.call('HMGET', KEYS[1], nf(r.node, 'status'), nf(r.node, 'attempt'), 'status', 'waiters')
if not is_live(state[3]) or state[1] ~= 'running' or tonumber(state[2]) ~= r.attempt then
  return cjson.encode({outcome = 'refused'})
end
notify(KEYS[1], r.event, state[4] or false)
return cjson.encode({outcome = 'recorded'})
