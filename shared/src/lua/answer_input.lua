-- answer_input: the client answers some or all of a task's pending input requests (tasks/update).
-- Answers to keys that are not pending are ignored. When nothing is left pending, the task goes
-- back to "working" and the waiting node wakes up.
--
-- KEYS[1] task hash
-- ARGV[1] input responses (JSON object: key -> the client's result)
-- ARGV[2] now (ms)   ARGV[3] owner asking   ARGV[4] events channel
-- Returns {"missing"} for no such task of this owner, {"not_waiting", status} when the task waits
-- for no input, {"answered", remaining} otherwise.
local state = redis.call('HMGET', KEYS[1], 'status', 'owner', 'inputRequests', 'inputResponses')
if not state[1] or state[2] ~= ARGV[3] then
  return {'missing'}
end
if state[1] ~= 'input_required' then
  return {'not_waiting', state[1]}
end
local pending = cjson.decode(state[3] or '{}')
local answered = cjson.decode(state[4] or '{}')
for key, value in pairs(cjson.decode(ARGV[1])) do
  if pending[key] ~= nil then
    answered[key] = value
    pending[key] = nil
  end
end
local remaining = 0
for _ in pairs(pending) do
  remaining = remaining + 1
end
redis.call('HSET', KEYS[1], 'inputResponses', cjson.encode(answered), 'updatedAt', ARGV[2])
if remaining == 0 then
  redis.call('HSET', KEYS[1], 'status', 'working', 'statusMessage', 'Input received; working', 'inputRequests', '{}')
  redis.call('PUBLISH', ARGV[4], cjson.encode({type = 'status', status = 'working', message = 'Input received; working'}))
else
  redis.call('HSET', KEYS[1], 'inputRequests', cjson.encode(pending))
end
return {'answered', remaining}
