-- resolve_claim: a claim on an idempotency key (create_task claims it when the key's shard is full
-- and the call is made in another shard) ends: it becomes the task made for it, or goes when no
-- shard had room (or when a later retry finds it abandoned). Only the claim the caller holds is
-- changed: a caller whose claim was taken over (it stalled past the claim's age) learns what the
-- key names now, and drops the task it made on hold, which never ran.
--
-- KEYS[1] the idempotency key
-- ARGV[1] the record (MessagePack): claim (the value the caller expects), value (what the key
--   becomes: "<task> <fingerprint>"; "" drops the claim), ttl (ms, with a value)
-- Returns JSON: {"outcome":"resolved"} | {"outcome":"lost","current":value?}
local r = cmsgpack.unpack(ARGV[1])
local current = redis.call('GET', KEYS[1])
if current ~= r.claim then
  if current then
    return cjson.encode({outcome = 'lost', current = current})
  end
  return cjson.encode({outcome = 'lost'})
end
if r.value == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], r.value, 'PX', r.ttl)
end
return cjson.encode({outcome = 'resolved'})
