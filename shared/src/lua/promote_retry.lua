-- promote_retry: a failed attempt's backoff has passed; its node joins its queue again, once.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] load hash   KEYS[3] retry zset
-- KEYS[4] the node's work stream
-- ARGV[1] the record (MessagePack): task, node, member (the retry set's member)
-- Returns JSON: {"outcome": "promoted" | "dropped"}
local r = cmsgpack.unpack(ARGV[1])
if redis.call('ZREM', KEYS[3], r.member) == 0 then
  return cjson.encode({outcome = 'dropped'})
end
local t = redis.call('HMGET', KEYS[1], 'status', 'traceparent')
local n = node_state(KEYS[1], r.node)
if not is_live(t[1]) or n.status ~= 'retry_wait' then
  return cjson.encode({outcome = 'dropped'})
end
enqueue(KEYS[1], KEYS[4], KEYS[2], r.task, r.node, n.tool, t[2])
return cjson.encode({outcome = 'promoted'})
