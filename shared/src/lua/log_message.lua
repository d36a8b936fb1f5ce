-- log_message: a running node logs a message for the client that follows its task (MCP
-- `notifications/message`): it goes to the task's waiters and is not stored. The worker has
-- already checked the message against the level the client asked for.
--
-- KEYS[1] task hash (it holds the nodes)
-- ARGV[1] the record (JSON): task, node, attempt, level, logger (or ""), data (JSON text)
-- Returns JSON: {"outcome": "recorded" | "refused"} (refused: task over, or a stale attempt)
local r = cjson.decode(ARGV[1])
local state = redis.call('HMGET', KEYS[1], nf(r.node, 'status'), nf(r.node, 'attempt'), 'status', 'waiters')
if not is_live(state[3]) or state[1] ~= 'running' or tonumber(state[2]) ~= r.attempt then
  return cjson.encode({outcome = 'refused'})
end
local event = '{"task":' .. cjson.encode(r.task) .. ',"type":"log","level":' .. cjson.encode(r.level) ..
  ',"logger":' .. cjson.encode(r.logger) .. ',"data":' .. r.data .. '}'
notify(KEYS[1], event, state[4] or false)
return cjson.encode({outcome = 'recorded'})
