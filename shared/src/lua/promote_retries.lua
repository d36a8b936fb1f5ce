-- promote_retries: move failed attempts whose backoff has passed back onto the work stream.
-- Any worker may run it at any time; each retry is promoted once.
--
-- KEYS[1] delayed retries zset (members "<taskId> <nodeId>", scored by due time)
-- KEYS[2] work stream   KEYS[3] load hash (promoted nodes join the queued counts)
-- ARGV[1] now (ms)   ARGV[2] most to promote
-- ARGV[3], ARGV[4], ARGV[5]: task key prefix, task hash suffix, nodes hash suffix (from keys.rs),
--   so that a task's keys are <prefix><taskId><suffix>
-- Returns the number promoted.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local promoted = 0
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  local task_id, node = string.match(member, '^(%S+) (%S+)$')
  if task_id then
    local task_key = ARGV[3] .. task_id .. ARGV[4]
    local nodes_key = ARGV[3] .. task_id .. ARGV[5]
    local status = redis.call('HGET', task_key, 'status')
    if status == 'working' and redis.call('HGET', nodes_key, node .. ':status') == 'retry_wait' then
      redis.call('HSET', nodes_key, node .. ':status', 'queued')
      redis.call('HINCRBY', KEYS[3], 'queued', 1)
      redis.call('HINCRBY', KEYS[3], 'queued:' .. (redis.call('HGET', nodes_key, node .. ':tool') or ''), 1)
      redis.call('XADD', KEYS[2], '*', 'task', task_id, 'node', node,
        'traceparent', redis.call('HGET', task_key, 'traceparent') or '')
      promoted = promoted + 1
    end
  end
end
return promoted
