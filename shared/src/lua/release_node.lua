-- release_node: a worker that stops (shutdown) hands a running node back to the queue at once,
-- instead of leaving it for a lease to run out: the node is queued again under a new stream entry
-- and the old entry is acknowledged, in one step.
--
-- KEYS[1] task hash   KEYS[2] nodes hash   KEYS[3] work stream   KEYS[4] load hash
-- ARGV[1] node id     ARGV[2] attempt (fencing token)   ARGV[3] the entry being handed back
-- ARGV[4] task id     ARGV[5] consumer group            ARGV[6] traceparent
-- Returns 1 when handed back, 0 when the attempt is stale (nothing written; the caller still
-- acknowledges nothing).
local node = ARGV[1]
local state = redis.call('HMGET', KEYS[2], node .. ':status', node .. ':attempt')
if state[1] ~= 'running' or state[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[2], node .. ':status', 'queued')
redis.call('HINCRBY', KEYS[4], 'queued', 1)
redis.call('HINCRBY', KEYS[4], 'queued:' .. (redis.call('HGET', KEYS[2], node .. ':tool') or ''), 1)
redis.call('HDEL', KEYS[2], node .. ':worker')
redis.call('XADD', KEYS[3], '*', 'task', ARGV[4], 'node', node, 'traceparent', ARGV[6])
redis.call('XACK', KEYS[3], ARGV[5], ARGV[3])
return 1
