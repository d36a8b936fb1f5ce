-- cancel_task: move a live task to "cancelled" and tell every worker.
-- A terminal task never changes; the caller learns its status instead.
--
-- KEYS[1] task hash   KEYS[2] nodes hash   KEYS[3] load hash (the owner's live count drops)
-- KEYS[4] expiring set (the task's owner-index entry goes when its keys do)
-- ARGV[1] task id     ARGV[2] now (ms)   ARGV[3] owner asking ("" skips the check)
-- ARGV[4] status message   ARGV[5] events channel   ARGV[6] cancel channel
-- Returns {"cancelled"} when this call cancelled the task, {"terminal", status} when it was
-- already terminal, {"missing"} when there is no such task for this owner.
local state = redis.call('HMGET', KEYS[1], 'status', 'owner', 'ttlMs')
if not state[1] or (ARGV[3] ~= '' and state[2] ~= ARGV[3]) then
  return {'missing'}
end
if state[1] ~= 'working' and state[1] ~= 'input_required' then
  return {'terminal', state[1]}
end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'statusMessage', ARGV[4], 'updatedAt', ARGV[2])
redis.call('HINCRBY', KEYS[3], 'live:' .. state[2], -1)
redis.call('ZADD', KEYS[4], tonumber(ARGV[2]) + tonumber(state[3]), state[2] .. ' ' .. ARGV[1])
redis.call('PEXPIRE', KEYS[1], state[3])
redis.call('PEXPIRE', KEYS[2], state[3])
redis.call('PUBLISH', ARGV[5], cjson.encode({type = 'status', status = 'cancelled', message = ARGV[4]}))
redis.call('PUBLISH', ARGV[6], ARGV[1])
return {'cancelled'}
