-- request_input: a running node asks the client for input; the task moves to "input_required".
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] node id     ARGV[2] attempt (fencing token)   ARGV[3] now (ms)
-- ARGV[4] input requests (JSON object: key -> elicitation/create or sampling request)
-- ARGV[5] status message   ARGV[6] events channel
-- Returns 1 when the task now waits for input, 0 when refused (task not working, stale attempt).
if redis.call('HGET', KEYS[1], 'status') ~= 'working' then
  return 0
end
local node = ARGV[1]
local state = redis.call('HMGET', KEYS[2], node .. ':status', node .. ':attempt')
if state[1] ~= 'running' or state[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1],
  'status', 'input_required',
  'inputRequests', ARGV[4],
  'inputResponses', '{}',
  'statusMessage', ARGV[5],
  'updatedAt', ARGV[3])
redis.call('PUBLISH', ARGV[6], cjson.encode({type = 'status', status = 'input_required', message = ARGV[5]}))
return 1
