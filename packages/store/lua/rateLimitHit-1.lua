--[[
  Counts events in a fixed window: the first of a window starts its expiry.

  KEYS[1] counter   ratelimit:<name>
  ARGV[1] window (ms); ARGV[2] how many events to count (1, or a block an api instance leases).

  Returns {count, ms left in the window}.

  Not written to the AOF nor sent to replicas (redis.set_repl): a counter is worth nothing after its
  minute, and with `appendfsync always` a write makes Redis fsync before it answers, so every
  admitted request would wait for the disk twice (here and at its create). A restart or a failover
  starts the affected windows afresh.
]]
redis.set_repl(redis.REPL_NONE)
local by = tonumber(ARGV[2] or '1')
local count = redis.call('INCRBY', KEYS[1], by)
if count == by then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}
