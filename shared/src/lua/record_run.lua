-- record_run: a tool's run joins its history under a name (newest first, the newest `keep` kept),
-- and the runs recorded before it come back, in one step. Safe to repeat: a run whose entry is
-- already in the history (this very call, sent again after its reply was lost) is not added
-- twice, and the runs before it come back as the first call would have seen them.
--
-- KEYS[1] the history list (a shared history, or one principal's memory list)
-- KEYS[2] for a principal's memory only: the load hash of the shard its memory lists live in, where
--   what a principal keeps is to be counted; not read or written yet
-- ARGV[1] the record (MessagePack): entry (the run as JSON text: it names its run and time, so that two
--   runs never have the same text), keep, and for a memory its owner (not read yet either)
-- Returns JSON: the entries (JSON texts) recorded before this one, newest first
local r = cmsgpack.unpack(ARGV[1])
local kept = redis.call('LRANGE', KEYS[1], 0, r.keep - 1)
for i, entry in ipairs(kept) do
  if entry == r.entry then
    local before = {}
    for j = i + 1, #kept do
      before[#before + 1] = kept[j]
    end
    return cjson.encode(before)
  end
end
redis.call('LPUSH', KEYS[1], r.entry)
redis.call('LTRIM', KEYS[1], 0, r.keep - 1)
if #kept == 0 then
  return '[]'
end
return cjson.encode(kept)
