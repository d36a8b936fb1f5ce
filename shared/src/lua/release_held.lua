-- release_held: the shard's maintenance puts nodes that were set aside (start_nodes) back on their
-- queue's stream, when no finishing node of that queue did: the worker that set them aside may
-- have a free slot for their owner by now, or another worker may.
--
-- KEYS[1] the queue's held list   KEYS[2] the queue's stream   KEYS[3] the shard's load hash
-- ARGV[1] the record (MessagePack): count (most to put back)
-- Returns JSON: {"released": n}
local r = cmsgpack.unpack(ARGV[1])
return cjson.encode({released = release_held(KEYS[1], KEYS[2], KEYS[3], r.count)})
