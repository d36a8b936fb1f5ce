-- start_node: a worker claims a queued node of a live task and starts its next attempt.
--
-- A reclaiming worker (one that took the entry over from a worker whose lease ran out) may also
-- start a node that is still marked running: the new attempt number fences the lost worker, and
-- the node's loss count goes up.
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] node id     ARGV[2] now (ms)     ARGV[3] worker name
-- ARGV[4] "1" when reclaiming an entry whose worker was lost
-- KEYS[3] load hash: a queued node that starts (or is dropped) leaves the queued counts
-- Returns {"run", attempt, tool, arguments, progressToken, timeoutMs, losses} when the worker must
-- run the node, or {"skip", reason} when it must acknowledge the entry without running it (task
-- gone or no longer working, node not queued).
local node = ARGV[1]
local node_status = redis.call('HGET', KEYS[2], node .. ':status')
if node_status == 'queued' then
  local tool = redis.call('HGET', KEYS[2], node .. ':tool') or ''
  redis.call('HINCRBY', KEYS[3], 'queued', -1)
  redis.call('HINCRBY', KEYS[3], 'queued:' .. tool, -1)
end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  if not node_status then
    redis.call('HINCRBY', KEYS[3], 'queued', -1)
  end
  return {'skip', 'task no longer exists'}
end
if status ~= 'working' then
  if node_status == 'queued' then
    redis.call('HSET', KEYS[2], node .. ':status', 'dropped')
  end
  return {'skip', 'task is ' .. status}
end
local losses = tonumber(redis.call('HGET', KEYS[2], node .. ':losses') or '0')
if node_status == 'running' and ARGV[4] == '1' then
  losses = redis.call('HINCRBY', KEYS[2], node .. ':losses', 1)
elseif node_status ~= 'queued' then
  return {'skip', 'node is ' .. tostring(node_status)}
end
local attempt = redis.call('HINCRBY', KEYS[2], node .. ':attempt', 1)
redis.call('HSET', KEYS[2],
  node .. ':status', 'running',
  node .. ':startedAt', ARGV[2],
  node .. ':worker', ARGV[3])
local task = redis.call('HMGET', KEYS[1], 'kind', 'progressToken', 'nodesSettled', 'nodeCount')
redis.call('HSET', KEYS[1], 'updatedAt', ARGV[2])
if task[1] == 'dag' then
  redis.call('HSET', KEYS[1], 'statusMessage',
    'Running ' .. node .. ' (' .. task[3] .. ' of ' .. task[4] .. ' nodes settled)')
end
local fields = redis.call('HMGET', KEYS[2], node .. ':tool', node .. ':args', node .. ':timeoutMs')
return {'run', attempt, fields[1], fields[2], task[2] or '', fields[3] or '0', losses}
