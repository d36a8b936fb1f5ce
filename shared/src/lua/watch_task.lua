-- watch_task: a process starts waiting on a task (a 2025-11-25 tasks/result, or a wait that lost
-- its events): its inbox channel joins the task's waiters, and the task is read in the same step,
-- so that no event can fall between the read and the wait.
--
-- KEYS[1] task hash
-- ARGV[1] the waiter's inbox channel
-- Returns the task hash as a flat list of fields and values (empty when there is no such task).
local t = redis.call('HGETALL', KEYS[1])
if #t == 0 then
  return t
end
local waiters = cjson.decode(redis.call('HGET', KEYS[1], 'waiters') or '[]')
for _, w in ipairs(waiters) do
  if w == ARGV[1] then
    return t
  end
end
waiters[#waiters + 1] = ARGV[1]
redis.call('HSET', KEYS[1], 'waiters', cjson.encode(waiters))
return t
