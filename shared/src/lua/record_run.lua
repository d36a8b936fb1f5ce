-- record_run: a tool's run joins its history under a name (newest first, the newest `keep` kept),
-- and the runs recorded before it come back, in one step. Safe to repeat: a run whose entry is
-- already in the history (this very call, sent again after its reply was lost) is not added
-- twice, and the runs before it come back as the first call would have seen them.
--
-- KEYS[1] the history list (a shared history, or one principal's memory list)
-- KEYS[2] for a principal's memory only: the load hash of the shard its memory lists live in, whose
--   `kept:<owner>` counts what the principal keeps there: the entry joins it, entries trimmed off
--   leave it
-- ARGV[1] the record (MessagePack): entry (the run as JSON text: it names its run and time, so that two
--   runs never have the same text), keep, and for a memory its owner
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
if KEYS[2] then
  -- What the push and trim below take off the end of the list, now at positions keep - 1 and on.
  local bytes = #r.entry
  for _, entry in ipairs(redis.call('LRANGE', KEYS[1], r.keep - 1, -1)) do
    bytes = bytes - #entry
  end
  store_bytes(nil, KEYS[2], r.owner, bytes)
end
redis.call('LPUSH', KEYS[1], r.entry)
redis.call('LTRIM', KEYS[1], 0, r.keep - 1)
if #kept == 0 then
  return '[]'
end
return cjson.encode(kept)
