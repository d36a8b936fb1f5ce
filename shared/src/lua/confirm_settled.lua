-- confirm_settled: a reader about to show a settled task's end, on a deployment that waits for
-- replicas, makes one write that changes nothing (the task's expiry, set again to what it is) so
-- that the `WAIT` it sends after this script covers everything written before, the task's end
-- included: the reader answers only once enough replicas have it.
--
-- KEYS[1] task hash
-- ARGV[1] the record (MessagePack): empty
-- Returns the task's expiry (ms, Redis's clock), or -1 / -2 (none / no such key).
local at = redis.call('PEXPIRETIME', KEYS[1])
if at > 0 then
  redis.call('PEXPIREAT', KEYS[1], at)
end
return at
