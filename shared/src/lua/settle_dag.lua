-- settle_dag: a worker has assembled a DAG task's result after its last node settled; the task
-- completes with it unless it already ended (cancelled, or failed by a node's policy). The
-- finalize entry is acknowledged either way.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] expiring zset
-- KEYS[4] the built-in queue's stream (where the finalize entry is)   KEYS[5] kept zset
-- ARGV[1] the record (MessagePack): task, result (JSON text), isError, message, entry, inlineMax,
--   toolErrorFails (bool: the call's wire makes a tool error a failed task, 2025-11-25),
--   deferEvents (the waiters' events come back with the reply instead of being published)
-- Returns JSON: {"outcome": "settled" (with settled: the task's status, and tool) | "dropped"}; with
--   deferEvents, as `reply` beside the `events` (prelude's with_events)
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
if r.deferEvents then
  defer_events()
end
ack(KEYS[4], r.entry)
local t = redis.call('HMGET', KEYS[1], 'status', 'ttlMs', 'owner', 'createdAt', 'tool', 'traceparent', 'nodeCount',
  'maxBytes', 'bytes', 'keptMax', 'mode')
if not is_live(t[1]) then
  return with_events(cjson.encode({outcome = 'dropped'}))
end
local result, message, is_error = r.result, r.message, r.isError
local fits, used, budget = fits_budget({maxBytes = t[8], bytes = t[9]}, #result)
local room, held, share = kept_room(KEYS[2], t[3] or '', #result, t[10])
if not room then
  mark_full(KEYS[2], t[3] or '')
  -- Past what the principal may keep in Redis, the task fails saying so.
  message = 'Failed: the result would be ' .. #result .. ' bytes, which passes what its principal may keep ' ..
    'in Redis (stored_bytes_per_principal: ' .. held .. ' bytes kept where this task lives, whose share of ' ..
    'the budget is ' .. share .. ')'
  result = '{"content":[{"type":"text","text":' .. cjson.encode(message) ..
    '}],"structuredContent":{"limit":"stored_bytes_per_principal","max":' .. share .. ',"held":' .. held ..
    ',"size":' .. #result .. '},"isError":true}'
  is_error = true
elseif not fits then
  -- The assembled result repeats what the nodes stored; past the budget, the task fails saying so.
  message = 'Failed: the result would be ' .. #result .. ' bytes, which passes the task\'s budget of ' .. budget ..
    ' bytes (max_task_bytes; ' .. (used - #result) .. ' already stored)'
  result = '{"content":[{"type":"text","text":' .. cjson.encode(message) ..
    '}],"structuredContent":{"limit":"max_task_bytes","max":' .. budget .. ',"size":' .. #result .. '},"isError":true}'
  is_error = true
end
local status = 'completed'
if is_error and r.toolErrorFails then
  -- That revision's rule: a tool error fails the task (its result is still kept).
  status = 'failed'
end
local task = {owner = t[3] or '', createdAt = t[4], ttlMs = t[2], nodeCount = t[7], bytes = t[9], mode = t[11] or false}
settle({task = KEYS[1], load = KEYS[2], expiring = KEYS[3], kept = KEYS[5]}, r.task, task, status, 'result', result,
  message, now, r.inlineMax)
return with_events(cjson.encode({outcome = 'settled', settled = status, tool = t[5], task = r.task, trace = t[6]}))
