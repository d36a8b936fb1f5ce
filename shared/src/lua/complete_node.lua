-- complete_node: settle a running node's attempt and, when the task is still live, the task.
-- Refuses a stale attempt, so a late or duplicate completion never overwrites a newer one,
-- and never changes a terminal task.
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] node id     ARGV[2] attempt (fencing token)   ARGV[3] now (ms)
-- ARGV[4] node outcome: "completed" | "failed" | "cancelled"
-- ARGV[5] task status to settle: "completed" | "failed"
-- ARGV[6] task field for the payload: "result" | "error"
-- ARGV[7] payload (JSON)
-- ARGV[8] status message
-- ARGV[9] events channel
-- ARGV[10] "1" when the result reports a tool error (isError): a task created on the 2025-11-25
--          wire then settles as "failed" (that revision's rule); on 2026-07-28 it stays "completed".
-- Returns 1 when the task was settled, 2 when the node was recorded but the task was already
-- terminal (its output is discarded), 0 when the attempt is stale and nothing was written.
local node = ARGV[1]
local state = redis.call('HMGET', KEYS[2], node .. ':status', node .. ':attempt')
if state[1] ~= 'running' or state[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[2], node .. ':status', ARGV[4], node .. ':finishedAt', ARGV[3])
if ARGV[4] == 'failed' then
  redis.call('HSET', KEYS[2], node .. ':error', ARGV[7])
end
redis.call('HINCRBY', KEYS[1], 'nodesSettled', 1)
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'working' and status ~= 'input_required' then
  return 2
end
local settled = ARGV[5]
if ARGV[10] == '1' and redis.call('HGET', KEYS[1], 'wire') == '2025-11-25' then
  settled = 'failed'
end
redis.call('HSET', KEYS[1],
  'status', settled,
  ARGV[6], ARGV[7],
  'statusMessage', ARGV[8],
  'updatedAt', ARGV[3])
local ttl = redis.call('HGET', KEYS[1], 'ttlMs')
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PUBLISH', ARGV[9], cjson.encode({type = 'status', status = settled, message = ARGV[8]}))
return 1
