-- settle_dag: a worker has assembled a DAG task's result after its last node settled; the task
-- completes with it unless it already ended (cancelled, or failed by a node's policy).
--
-- KEYS[1] task hash   KEYS[2] nodes hash   KEYS[3] load hash (the owner's live count drops)
-- KEYS[4] expiring set (the task's owner-index entry goes when its keys do)   ARGV[6] task id
-- ARGV[1] now (ms)    ARGV[2] result (CallToolResult JSON)   ARGV[3] status message
-- ARGV[4] events channel   ARGV[5] "1" when the result reports an error (isError)
-- Returns 1 when the task settled, 0 when it had already ended.
local state = redis.call('HMGET', KEYS[1], 'status', 'ttlMs', 'wire')
if state[1] ~= 'working' and state[1] ~= 'input_required' then
  return 0
end
local status = 'completed'
if ARGV[5] == '1' and state[3] == '2025-11-25' then
  -- That revision's rule: a tool error fails the task (its result is still kept).
  status = 'failed'
end
redis.call('HSET', KEYS[1], 'status', status, 'result', ARGV[2], 'statusMessage', ARGV[3],
  'updatedAt', ARGV[1])
local owner = redis.call('HGET', KEYS[1], 'owner') or ''
redis.call('HINCRBY', KEYS[3], 'live:' .. owner, -1)
redis.call('ZADD', KEYS[4], tonumber(ARGV[1]) + tonumber(state[2]), owner .. ' ' .. ARGV[6])
redis.call('PEXPIRE', KEYS[1], state[2])
redis.call('PEXPIRE', KEYS[2], state[2])
redis.call('PUBLISH', ARGV[4], cjson.encode({type = 'status', status = status, message = ARGV[3]}))
return 1
