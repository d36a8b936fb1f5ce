-- watch_task: a process starts waiting on a task (a 2025-11-25 tasks/result, or a wait that lost
-- its events): its inbox channel joins the task's waiters, and the task is read in the same step,
-- so that no event can fall between the read and the wait.
--
-- The owner is checked before anything is written: a waiter that may not see the task reads it
-- (so that the refusal can be told and audited) but never joins it.
--
-- KEYS[1] task hash
-- ARGV[1] the waiter's inbox channel   ARGV[2] the owner the waiter may see ("" for any)
-- ARGV[3 ..] the task fields to read
-- Returns the values of those fields, then Redis's clock (ms) as text, by which the caller tells
-- whether the task is past its TTL; nothing at all when there is no such task.
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local values = redis.call('HMGET', KEYS[1], 'waiters', 'owner', unpack(fields))
if not values[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
if ARGV[2] ~= '' and values[2] ~= ARGV[2] then
  table.remove(values, 1)
  table.remove(values, 1)
  values[#values + 1] = tostring(redis_now())
  return values
end
local waiters = cjson.decode(values[1] or '[]')
local known = false
for _, w in ipairs(waiters) do
  known = known or w == ARGV[1]
end
if not known then
  waiters[#waiters + 1] = ARGV[1]
  redis.call('HSET', KEYS[1], 'waiters', cjson.encode(waiters))
end
table.remove(values, 1)
table.remove(values, 1)
values[#values + 1] = tostring(redis_now())
return values
