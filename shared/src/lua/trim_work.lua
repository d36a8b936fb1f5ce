-- trim_work: drop work-stream entries every worker is done with, so the stream does not grow
-- without bound. Entries that are pending (delivered, not acknowledged) or not yet delivered are
-- kept: the trim point is the oldest pending entry, or else just after the group's last delivered
-- entry.
--
-- KEYS[1] work stream   ARGV[1] consumer group
-- Returns the number of entries removed.
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function before(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local last = nil
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local fields = {}
  for i = 1, #group, 2 do
    fields[group[i]] = group[i + 1]
  end
  if fields['name'] == ARGV[1] then
    last = fields['last-delivered-id']
  end
end
if not last or last == '0-0' then
  return 0
end
-- Everything up to and including the last delivered entry may go, unless still pending.
local last_ms, last_seq = string.match(last, '^(%d+)-(%d+)$')
local keep_from = last_ms .. '-' .. (tonumber(last_seq) + 1)
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
if pending[1] > 0 and before(pending[2], keep_from) then
  keep_from = pending[2]
end
return redis.call('XTRIM', KEYS[1], 'MINID', keep_from)
