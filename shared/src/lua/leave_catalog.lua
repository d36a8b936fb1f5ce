-- leave_catalog: a worker that stopped, or was lost long ago, leaves the catalog: its record, its
-- liveness, and every published tool that no worker left in the catalog offers. In one step, so
-- that a worker announcing itself meanwhile never loses a tool it has just published (it writes
-- its record before its tools).
--
-- KEYS[1] the workers hash   KEYS[2] the liveness zset   KEYS[3] the tools hash
-- ARGV[1] the record (MessagePack): name
-- Returns JSON: {"tools": n (tools removed)}
local r = cmsgpack.unpack(ARGV[1])
redis.call('HDEL', KEYS[1], r.name)
redis.call('ZREM', KEYS[2], r.name)
local offered = {}
local records = redis.call('HVALS', KEYS[1])
for _, text in ipairs(records) do
  local ok, record = pcall(cjson.decode, text)
  if not ok or type(record) ~= 'table' or type(record.tools) ~= 'table' then
    -- A record this script cannot read may offer anything: nothing is removed.
    return cjson.encode({tools = 0})
  end
  for _, tool in ipairs(record.tools) do
    offered[tool] = true
  end
end
local gone = {}
for _, tool in ipairs(redis.call('HKEYS', KEYS[3])) do
  if not offered[tool] then
    gone[#gone + 1] = tool
  end
end
if #gone > 0 then
  redis.call('HDEL', KEYS[3], unpack(gone))
end
return cjson.encode({tools = #gone})
