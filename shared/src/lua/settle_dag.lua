-- settle_dag: a worker has assembled a DAG task's result after its last node settled; the task
-- completes with it unless it already ended (cancelled, or failed by a node's policy).
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] now (ms)    ARGV[2] result (CallToolResult JSON)   ARGV[3] status message
-- ARGV[4] events channel
-- Returns 1 when the task settled, 0 when it had already ended.
local state = redis.call('HMGET', KEYS[1], 'status', 'ttlMs')
if state[1] ~= 'working' and state[1] ~= 'input_required' then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'completed', 'result', ARGV[2], 'statusMessage', ARGV[3],
  'updatedAt', ARGV[1])
redis.call('PEXPIRE', KEYS[1], state[2])
redis.call('PEXPIRE', KEYS[2], state[2])
redis.call('PUBLISH', ARGV[4], cjson.encode({type = 'status', status = 'completed', message = ARGV[3]}))
return 1
