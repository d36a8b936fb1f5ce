-- answer_input: the client answers some or all of a task's pending input requests (tasks/update).
-- Answers to keys that are not pending are ignored. When nothing is left pending, the task goes
-- back to "working" and its waiters (the asking node's worker among them) hear of it.
--
-- KEYS[1] task hash
-- ARGV[1] the record (JSON): task, responses (JSON text: key -> the client's result), now, owner
-- Returns JSON: {"outcome":"missing"} (no such task of this owner) | {"outcome":"notWaiting",
--   "status":s} | {"outcome":"answered","remaining":n}
local r = cjson.decode(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'status', 'owner', 'inputRequests', 'inputResponses')
if not state[1] or state[2] ~= r.owner then
  return cjson.encode({outcome = 'missing'})
end
if state[1] ~= 'input_required' then
  return cjson.encode({outcome = 'notWaiting', status = state[1]})
end
local pending = cjson.decode(state[3] or '{}')
local answered = cjson.decode(state[4] or '{}')
for key, value in pairs(cjson.decode(r.responses)) do
  if pending[key] ~= nil then
    answered[key] = value
    pending[key] = nil
  end
end
local remaining = 0
for _ in pairs(pending) do
  remaining = remaining + 1
end
redis.call('HSET', KEYS[1], 'inputResponses', cjson.encode(answered), 'updatedAt', r.now)
if remaining == 0 then
  local message = 'Input received; working'
  redis.call('HSET', KEYS[1], 'status', 'working', 'statusMessage', message, 'inputRequests', '{}')
  notify(KEYS[1], status_event(r.task, 'working', message))
else
  redis.call('HSET', KEYS[1], 'inputRequests', cjson.encode(pending))
end
return cjson.encode({outcome = 'answered', remaining = remaining})
