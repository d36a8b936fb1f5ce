-- promote_retry: a failed attempt's backoff has passed; its node joins its queue again, once.
--
-- KEYS[1] task hash   KEYS[2] nodes hash   KEYS[3] load hash   KEYS[4] retry zset
-- KEYS[5] the node's work stream
-- ARGV[1] the record (MessagePack): task, node, member (the retry set's member)
-- Returns JSON: {"outcome": "promoted" | "dropped"}
local r = cmsgpack.unpack(ARGV[1])
if redis.call('ZREM', KEYS[4], r.member) == 0 then
  return cjson.encode({outcome = 'dropped'})
end
local t = redis.call('HMGET', KEYS[1], 'status', 'traceparent')
local n = node_state(KEYS[2], r.node)
if not is_live(t[1]) or n.status ~= 'retry_wait' then
  return cjson.encode({outcome = 'dropped'})
end
enqueue(KEYS[2], KEYS[5], KEYS[3], r.task, r.node, n.tool, t[2])
return cjson.encode({outcome = 'promoted'})
