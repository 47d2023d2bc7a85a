--[[
  Counts one event in a fixed window: the first event of a window starts its expiry.

  KEYS[1] counter   ratelimit:<name>
  ARGV[1] window (ms).

  Returns {count, ms left in the window}.

  Not written to the AOF nor sent to replicas (redis.set_repl): a counter is worth nothing after its
  minute, and with `appendfsync always` a write makes Redis fsync before it answers, so every
  admitted request would wait for the disk twice (here and at its create). A restart or a failover
  starts the affected windows afresh.
]]
redis.set_repl(redis.REPL_NONE)
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}
