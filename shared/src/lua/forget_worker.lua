-- forget_worker: a worker that stopped (or was lost, once its entries were taken over) leaves the
-- consumer groups of one shard's streams, where it holds no pending entry: deleting a consumer
-- would drop what it holds, so one that still holds entries stays for maintenance to take over.
--
-- KEYS the shard's work streams the worker read
-- ARGV[1] the record (MessagePack): consumer
-- Returns JSON: {"kept": n (streams where it still holds entries)}
local r = cmsgpack.unpack(ARGV[1])
local kept = 0
for _, stream in ipairs(KEYS) do
  if redis.call('EXISTS', stream) == 1 then
    local ok, pending = pcall(redis.call, 'XPENDING', stream, GROUP, '-', '+', 1, r.consumer)
    if ok and #pending == 0 then
      redis.call('XGROUP', 'DELCONSUMER', stream, GROUP, r.consumer)
    elseif ok then
      kept = kept + 1
    end
  end
end
return cjson.encode({kept = kept})
