-- create_task: write a new task, its single node, index it under its owner and enqueue the node.
-- Runs before the client gets its create result, so tasks/get on the returned id always resolves.
--
-- KEYS[1] task hash          cv:{id}:task
-- KEYS[2] nodes hash         cv:{id}:nodes
-- KEYS[3] owner index zset   cv:owner:<owner>:tasks
-- KEYS[4] work stream        cv:work
-- ARGV[1]  task id            ARGV[2]  node id          ARGV[3]  now (ms)
-- ARGV[4]  owner              ARGV[5]  tool             ARGV[6]  arguments (JSON)
-- ARGV[7]  ttl (ms)           ARGV[8]  poll interval (ms)
-- ARGV[9]  wire protocol      ARGV[10] progress token (JSON, or "")
-- ARGV[11] traceparent        ARGV[12] mode ("task" | "sync")
-- ARGV[13] index under owner ("1" | "0")
-- ARGV[14] initial status message
-- ARGV[15] owner index retention (ms): entries older than now minus this are trimmed
-- Returns 1 when created, 0 when a task with this id already exists (nothing is written).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local now = ARGV[3]
redis.call('HSET', KEYS[1],
  'status', 'working',
  'statusMessage', ARGV[14],
  'createdAt', now,
  'updatedAt', now,
  'ttlMs', ARGV[7],
  'pollMs', ARGV[8],
  'owner', ARGV[4],
  'tool', ARGV[5],
  'arguments', ARGV[6],
  'wire', ARGV[9],
  'progressToken', ARGV[10],
  'traceparent', ARGV[11],
  'mode', ARGV[12],
  'nodeCount', 1,
  'nodesSettled', 0)
local node = ARGV[2]
redis.call('HSET', KEYS[2],
  node .. ':status', 'queued',
  node .. ':attempt', 0,
  node .. ':tool', ARGV[5],
  node .. ':args', ARGV[6])
if ARGV[13] == '1' then
  redis.call('ZADD', KEYS[3], now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (tonumber(now) - tonumber(ARGV[15])))
  redis.call('PEXPIRE', KEYS[3], ARGV[15])
end
redis.call('XADD', KEYS[4], '*', 'task', ARGV[1], 'node', node, 'traceparent', ARGV[11])
return 1
