-- record_run: a tool's run joins its history under a name (newest first, the newest `keep` kept),
-- and the runs recorded before it come back, in one step. Safe to repeat: a run whose entry is
-- already in the history (this very call, sent again after its reply was lost) is not added
-- twice, and the runs before it come back as the first call would have seen them.
--
-- A shared history is fenced by the attempt that records, as completions are: its fence hash holds,
-- for each node that recorded (`run`: task and node), the attempt that did and the digest of its
-- entry. A record from an earlier attempt than the one in the fence (a worker whose node was taken
-- over, recording late) is refused; a later attempt's entry replaces the earlier one's, so that a
-- node is in the history once, as its newest attempt saw it. The caller checked, just before, that
-- the attempt was still its node's current one in the task hash (which lives in another slot): an
-- attempt taken over before it records never records; one taken over in between is replaced when
-- the attempt that took over records, and refused if that one recorded first.
--
-- KEYS[1] the history list (a shared history, or one principal's memory list)
-- KEYS[2] a shared history's fence hash; for a principal's memory, the load hash of the shard its
--   memory lists live in, whose `kept:<owner>` counts what the principal keeps there: the entry
--   joins it, entries trimmed off leave it
-- ARGV[1] the record (MessagePack): entry (the run as JSON text: it names its run and time, so that two
--   runs never have the same text), keep; for a shared history run (`<task>/<node>`) and attempt; for
--   a memory its owner
-- Returns JSON: the entries (JSON texts) recorded before this one, newest first; or
--   {"outcome":"stale"} for a run of an attempt that another attempt of its node replaced
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
if r.run then
  local fence = redis.call('HGET', KEYS[2], r.run)
  if fence then
    local attempt, digest = string.match(fence, '^(%d+) (%x+)$')
    if tonumber(attempt) > r.attempt then
      return cjson.encode({outcome = 'stale'})
    end
    -- An earlier attempt of the same node recorded: its entry goes, this one takes its place.
    for _, entry in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
      if redis.sha1hex(entry) == digest then
        redis.call('LREM', KEYS[1], 1, entry)
        kept = redis.call('LRANGE', KEYS[1], 0, r.keep - 1)
        break
      end
    end
  end
  redis.call('HSET', KEYS[2], r.run, r.attempt .. ' ' .. redis.sha1hex(r.entry))
elseif KEYS[2] then
  -- What the push and trim below take off the end of the list, now at positions keep - 1 and on.
  local bytes = #r.entry
  for _, entry in ipairs(redis.call('LRANGE', KEYS[1], r.keep - 1, -1)) do
    bytes = bytes - #entry
  end
  store_bytes(nil, KEYS[2], r.owner, bytes)
end
redis.call('LPUSH', KEYS[1], r.entry)
redis.call('LTRIM', KEYS[1], 0, r.keep - 1)
if r.run and redis.call('HLEN', KEYS[2]) > 2 * r.keep then
  -- The fences of runs trimmed off the history go, so that the hash stays near the history's size.
  local digests = {}
  for _, entry in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
    digests[redis.sha1hex(entry)] = true
  end
  local fences = redis.call('HGETALL', KEYS[2])
  for i = 1, #fences, 2 do
    local digest = string.match(fences[i + 1], ' (%x+)$')
    if not digests[digest] then
      redis.call('HDEL', KEYS[2], fences[i])
    end
  end
end
if #kept == 0 then
  return '[]'
end
return cjson.encode(kept)
