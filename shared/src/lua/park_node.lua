-- park_node: a running node needs answers from the client before it can go on. Its entry is
-- acknowledged and its worker slot freed; its requests join the task's pending input (keys of a
-- graph's node are prefixed with the node id, so that nodes never collide); the task moves to
-- "input_required" and its waiters hear of it, with the pending requests when they are small.
-- answer_input queues the node again, as a new attempt, once all of its requests are answered.
--
-- Requests travel and are stored as JSON texts that this script never decodes, so that what the
-- client sees is exactly what the tool wrote. Each parking is a new round of the task's input
-- (`inputRound`), and each pending key remembers the round that asked it (`inputRounds`): an
-- answer that names a round is taken only for the key as that round asked it, so that a replayed
-- answer never answers a later question under the same key.
--
-- What the node asks and the state it parks with count as bytes the task's owner keeps, until the
-- task's keys expire.
--
-- A synchronous call whose rounds are told to its client (created with `roundsMax`: 2026-07-28
-- MRTR, where the client answers in a later call, or never) leaves its owner's live tasks while it
-- waits, and counts among its owner's parked rounds instead (`rounds:<owner>`, and the owner's
-- rounds index): a client that abandons rounds never locks itself out of new calls. Past the
-- shard's share of parked rounds, the reply says how many too many there are, and the store ends
-- the owner's oldest unanswered rounds (cancel_task with parkedRound). answer_input brings the
-- call back among the live ones.
--
-- KEYS[1] task hash (it holds the nodes)   KEYS[2] the work stream the attempt's entry is in
-- KEYS[3] load hash   KEYS[4] the owner's rounds index in the shard
-- ARGV[1] the record (MessagePack): task, node, attempt, requests (key -> the request as JSON
--   text), state (JSON text, or "" for none), message, inlineMax
-- Returns JSON: {"outcome": "parked" (with over: the owner's parked rounds past its share here)
--   | "dropped" (the task is over; the entry is acknowledged) | "stale"}
local r = cmsgpack.unpack(ARGV[1])
local now = redis_now()
local node = r.node
local n = node_state(KEYS[1], node, {'status', 'kind', 'inputKeys', 'waiters', 'inputRounds', 'owner', 'mode',
  'roundsMax', 'parkedRound', 'ttlMs'})
if n.status ~= 'running' or n.attempt ~= r.attempt then
  return cjson.encode({outcome = 'stale'})
end
ack(KEYS[2], n.entry)
local t = n.task
if not is_live(t.status) then
  redis.call('HSET', KEYS[1], nf(node, 'status'), 'dropped', nf(node, 'entry'), '')
  redis.call('HDEL', KEYS[1], nf(node, 'worker'))
  return cjson.encode({outcome = 'dropped'})
end
local prefix = ''
if t.kind == 'dag' then
  prefix = node .. '/'
end
local owners = cjson.decode(t.inputKeys or '{}')
local rounds = cjson.decode(t.inputRounds or '{}')
local round = redis.call('HINCRBY', KEYS[1], 'inputRound', 1)
local asks = {}
local stored = #r.state
for key, text in pairs(r.requests) do
  stored = stored + #text
  local full = prefix .. key
  owners[full] = node
  rounds[full] = round
  asks[full] = key
  redis.call('HSET', KEYS[1], 'ask/' .. full, text)
end
local rounds_text = cjson.encode(rounds)
store_bytes(KEYS[1], KEYS[3], t.owner or '', stored)
redis.call('HDEL', KEYS[1], nf(node, 'worker'))
-- A round of input is an attempt, but no try of the tool's: it spends no retry.
redis.call('HINCRBY', KEYS[1], nf(node, 'untried'), 1)
local pending = pending_requests(KEYS[1], owners)
local over = 0
if t.roundsMax and t.mode == 'sync' and t.kind ~= 'dag' and not t.parkedRound then
  local owner = t.owner or ''
  count_down(KEYS[3], 'live:' .. owner, 1)
  local parked = redis.call('HINCRBY', KEYS[3], 'rounds:' .. owner, 1)
  redis.call('HSET', KEYS[1], 'parkedRound', '1')
  redis.call('ZADD', KEYS[4], now, r.task)
  -- The index lives as long as the longest round in it may.
  local ttl = tonumber(t.ttlMs) or 0
  if ttl > redis.call('PTTL', KEYS[4]) then
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
  local share = tonumber(t.roundsMax) or -1
  if share >= 0 and parked > share then
    over = parked - share
  end
end
redis.call('HSET', KEYS[1], nf(node, 'status'), 'parked', nf(node, 'entry'), '', nf(node, 'asks'), cjson.encode(asks),
  nf(node, 'state'), r.state, nf(node, 'answers'), '', 'status', 'input_required', 'inputRequests', pending,
  'inputKeys', cjson.encode(owners), 'inputRounds', rounds_text, 'statusMessage', r.message, 'updatedAt', now)
local event = status_event(r.task, 'input_required', r.message, 'inputRequests', pending, r.inlineMax)
if string.find(event, '"inputRequests":', 1, true) then
  -- The requests travel with the event: so do the rounds that asked them.
  event = string.sub(event, 1, -2) .. ',"inputRounds":' .. rounds_text .. '}'
end
notify(KEYS[1], event, t.waiters)
return cjson.encode({outcome = 'parked', over = over})
