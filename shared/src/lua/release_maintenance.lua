-- release_maintenance: a stopping worker hands the deployment's maintenance lease over, so that the
-- next heartbeat of a live worker takes it at once instead of after it runs out. Only the holder
-- gives it up: a lease another worker took meanwhile stays with that worker.
--
-- KEYS[1] the maintenance lease
-- ARGV[1] the record (MessagePack): name (the stopping worker's)
-- Returns JSON: {"released": bool}
local r = cmsgpack.unpack(ARGV[1])
local released = false
if redis.call('GET', KEYS[1]) == r.name then
  redis.call('DEL', KEYS[1])
  released = true
end
return cjson.encode({released = released})
