-- remember_call: a synchronous call joins the list of calls under its request id (`keys.call`),
-- so that a `notifications/cancelled` naming that id finds it: the newest CALLS_KEPT, kept as long
-- as the longest-lived of them (store/tasks.rs does the same for a call that lands in another
-- shard). scripts.rs puts this file in front of the prelude, and in front of `create_calls`, which
-- runs without the prelude. A new list (the usual case: one call under its id) takes its TTL with
-- no trim and no read of the one it had.
local CALLS_KEPT = 16
local function remember_call(key, task_id, ttl)
  if redis.call('LPUSH', key, task_id) == 1 then
    redis.call('PEXPIRE', key, ttl)
    return
  end
  redis.call('LTRIM', key, 0, CALLS_KEPT - 1)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
