-- report_progress: record a running node's progress on its task and tell the task's waiters.
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] the record (JSON): task, node, attempt, now, progress, total (or null), message (or null)
-- Returns JSON: {"outcome": "recorded" | "refused"} (refused: task over, or a stale attempt)
local r = cjson.decode(ARGV[1])
local state = redis.call('HMGET', KEYS[2], nf(r.node, 'status'), nf(r.node, 'attempt'), 'status', 'waiters')
if not is_live(state[3]) or state[1] ~= 'running' or tonumber(state[2]) ~= r.attempt then
  return cjson.encode({outcome = 'refused'})
end
local fields = {'progress', r.progress, 'updatedAt', r.now}
local event = {task = r.task, type = 'progress', progress = tonumber(r.progress)}
if r.total ~= cjson.null then
  fields[#fields + 1] = 'total'
  fields[#fields + 1] = r.total
  event.total = tonumber(r.total)
end
if r.message ~= cjson.null then
  fields[#fields + 1] = 'statusMessage'
  fields[#fields + 1] = r.message
  event.message = r.message
end
redis.call('HSET', KEYS[1], unpack(fields))
notify(KEYS[1], cjson.encode(event), state[4] or false)
return cjson.encode({outcome = 'recorded'})
