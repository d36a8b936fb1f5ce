-- release_task: a task made on hold joins its queues. A call with an idempotency key whose own shard
-- was full claims its key there and makes its task in another shard on hold (create_task with
-- `hold`): counted in every load count, but with no stream entry, so that nothing runs it. Once the
-- claim resolves to this task, its nodes without dependencies get their entries. Safe to repeat,
-- and by anyone that finds the key naming the task (a retry of the call after the first creator
-- stopped half-way): a task no longer on hold is left as it is, and a task that ended meanwhile
-- (cancelled: its queued nodes left the counts then) only leaves its hold.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2 ..] the work stream of each of the task's
-- queues, in the order of its `queues`
-- ARGV[1] the record (MessagePack): task, queues (how many streams the caller passed)
-- Returns JSON: {"outcome":"released","count":n} | {"outcome":"none"} (not on hold)
--   | {"outcome":"queuesChanged"}
local r = cmsgpack.unpack(ARGV[1])
local t = redis.call('HMGET', KEYS[1], 'onHold', 'status', 'traceparent', 'queues')
if not t[1] then
  return cjson.encode({outcome = 'none'})
end
if #cjson.decode(t[4] or '[]') ~= r.queues then
  return cjson.encode({outcome = 'queuesChanged'})
end
redis.call('HDEL', KEYS[1], 'onHold')
if not is_live(t[2]) then
  return cjson.encode({outcome = 'none'})
end
-- The nodes by their status fields (names only: the call record and arguments stay in Redis).
local count = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local node = string.match(field, '^([^:/]+):status$')
  if node then
    local n = redis.call('HMGET', KEYS[1], field, nf(node, 'entry'), nf(node, 'q'))
    if n[1] == 'queued' and not n[2] then
      local entry = redis.call('XADD', KEYS[1 + tonumber(n[3] or '1')], '*', 'task', r.task, 'node', node,
        'trace', t[3] or '')
      redis.call('HSET', KEYS[1], nf(node, 'entry'), entry)
      count = count + 1
    end
  end
end
return cjson.encode({outcome = 'released', count = count})
