-- request_input: a running node asks the client for input; the task moves to "input_required",
-- and the asking worker joins the task's waiters so that the answer reaches its inbox.
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] the record (JSON): task, node, attempt, now, requests (JSON text: key -> request),
--   message, waiter (the worker's inbox channel)
-- Returns JSON: {"outcome": "waiting" | "refused"} (refused: task not working, or a stale attempt)
local r = cjson.decode(ARGV[1])
local t = redis.call('HMGET', KEYS[1], 'status', 'waiters')
if t[1] ~= 'working' then
  return cjson.encode({outcome = 'refused'})
end
local state = redis.call('HMGET', KEYS[2], nf(r.node, 'status'), nf(r.node, 'attempt'))
if state[1] ~= 'running' or tonumber(state[2]) ~= r.attempt then
  return cjson.encode({outcome = 'refused'})
end
local waiters = cjson.decode(t[2] or '[]')
local known = false
for _, w in ipairs(waiters) do
  known = known or w == r.waiter
end
if not known then
  waiters[#waiters + 1] = r.waiter
end
redis.call('HSET', KEYS[1], 'status', 'input_required', 'inputRequests', r.requests, 'inputResponses', '{}',
  'statusMessage', r.message, 'updatedAt', r.now, 'waiters', cjson.encode(waiters))
notify(KEYS[1], status_event(r.task, 'input_required', r.message))
return cjson.encode({outcome = 'waiting'})
