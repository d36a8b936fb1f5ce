-- answer_input: the client answers some or all of a task's pending input requests (tasks/update,
-- an MRTR retry, or responses to server-to-client requests). Answers to keys that are not pending
-- are ignored. A parked node whose requests are all answered joins its queue again with its
-- answers; it runs as a new attempt on any worker. The task goes back to "working" when nothing
-- is pending any more; until then `inputRequests` shows only what is still pending.
--
-- Answers travel and are stored as JSON texts this script never decodes (see pending_requests).
-- They count as bytes the task's owner keeps, until the task's keys expire.
--
-- A synchronous call parked in a round its client was told of (park_node) is back among its owner's
-- live tasks once nothing is pending, and leaves its parked rounds.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] the owner's rounds index
-- KEYS[4 ..] the work stream of each of the task's queues, in the order of the task's `queues`
-- ARGV[1] the record (MessagePack): task, owner, responses (key -> the client's result as JSON text),
--   rounds (key -> the round of the question the answer is for, when the answer names one: an
--   answer whose key is pending from another round is ignored), queues (how many streams
--   the caller passed)
-- Returns JSON: {"outcome":"missing"} (no such task) | {"outcome":"denied"} (another owner's task;
--   nothing written) | {"outcome":"notWaiting",
--   "status":s} | {"outcome":"answered","remaining":n,"resumed":n} | {"outcome":"queuesChanged"}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local task = KEYS[1]
local state = redis.call('HMGET', task, 'status', 'owner', 'inputKeys', 'queues', 'traceparent', 'waiters',
  'inputRounds', 'parkedRound')
if not state[1] then
  return cjson.encode({outcome = 'missing'})
end
if state[2] ~= r.owner then
  return cjson.encode({outcome = 'denied'})
end
if state[1] ~= 'input_required' then
  return cjson.encode({outcome = 'notWaiting', status = state[1]})
end
if #cjson.decode(state[4] or '[]') ~= r.queues then
  return cjson.encode({outcome = 'queuesChanged'})
end
local owners = cjson.decode(state[3] or '{}')
local rounds = cjson.decode(state[7] or '{}')
local named = r.rounds or {}
local touched = {}
for key, text in pairs(r.responses) do
  local node = owners[key]
  if node and (named[key] == nil or named[key] == rounds[key]) then
    redis.call('HSET', task, 'answer/' .. key, text)
    store_bytes(task, KEYS[2], r.owner, #text)
    redis.call('HDEL', task, 'ask/' .. key)
    owners[key] = nil
    rounds[key] = nil
    touched[node] = true
  end
end
local waiting = {}
for _, node in pairs(owners) do
  waiting[node] = true
end
local resumed = 0
for node in pairs(touched) do
  if not waiting[node] then
    -- Every request of this node is answered: it runs again with the answers, by its own keys.
    local asks = cjson.decode(redis.call('HGET', task, nf(node, 'asks')) or '{}')
    local parts = {}
    for full, key in pairs(asks) do
      parts[#parts + 1] = cjson.encode(key) .. ':' .. (redis.call('HGET', task, 'answer/' .. full) or 'null')
      redis.call('HDEL', task, 'answer/' .. full)
    end
    local n = node_state(task, node)
    redis.call('HSET', task, nf(node, 'answers'), '{' .. table.concat(parts, ',') .. '}')
    enqueue(task, KEYS[3 + n.q], KEYS[2], r.task, node, n.tool, state[5])
    resumed = resumed + 1
  end
end
local remaining = 0
for _ in pairs(owners) do
  remaining = remaining + 1
end
local pending = pending_requests(task, owners)
redis.call('HSET', task, 'inputKeys', cjson.encode(owners), 'inputRounds', cjson.encode(rounds), 'inputRequests',
  pending, 'updatedAt', now)
if remaining == 0 then
  local message = 'Input received; working'
  redis.call('HSET', task, 'status', 'working', 'statusMessage', message)
  if state[8] then
    -- Answered: the call holds a live slot again (even past its owner's limit for a moment: it
    -- was admitted as live, and its round was bounded meanwhile).
    redis.call('HDEL', task, 'parkedRound')
    count_down(KEYS[2], 'rounds:' .. r.owner, 1)
    redis.call('HINCRBY', KEYS[2], 'live:' .. r.owner, 1)
    redis.call('ZREM', KEYS[3], r.task)
  end
  notify(task, status_event(r.task, 'working', message), state[6])
end
return cjson.encode({outcome = 'answered', remaining = remaining, resumed = resumed})
