-- report_progress: record a running node's progress on its task and announce it.
--
-- KEYS[1] task hash   KEYS[2] nodes hash
-- ARGV[1] node id     ARGV[2] attempt (fencing token)   ARGV[3] now (ms)
-- ARGV[4] progress    ARGV[5] total ("" when unknown)    ARGV[6] message ("" when none)
-- ARGV[7] events channel
-- Returns 1 when recorded, 0 when refused (task not working, or a stale attempt).
if redis.call('HGET', KEYS[1], 'status') ~= 'working' then
  return 0
end
local node = ARGV[1]
local state = redis.call('HMGET', KEYS[2], node .. ':status', node .. ':attempt')
if state[1] ~= 'running' or state[2] ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'progress', ARGV[4], 'updatedAt', ARGV[3])
local event = {type = 'progress', progress = tonumber(ARGV[4])}
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'total', ARGV[5])
  event.total = tonumber(ARGV[5])
end
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'statusMessage', ARGV[6])
  event.message = ARGV[6]
end
redis.call('PUBLISH', ARGV[7], cjson.encode(event))
return 1
