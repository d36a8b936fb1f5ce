-- reap_expired: remove the owner-index entries of tasks whose keys have expired, so that an
-- owner's index holds only tasks that still exist. Any worker may run it at any time.
--
-- KEYS[1] expiring set (members "<owner> <taskId>", scored by the time the task's keys expire)
-- ARGV[1] now (ms)   ARGV[2] most to remove
-- ARGV[3], ARGV[4]: owner index key prefix and suffix (from keys.rs): <prefix><owner><suffix>
-- Returns the number removed.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  local owner, task_id = string.match(member, '^(.*) (%S+)$')
  if owner then
    redis.call('ZREM', ARGV[3] .. owner .. ARGV[4], task_id)
  end
  redis.call('ZREM', KEYS[1], member)
end
return #due
