--[[
  Counts one event on a counter only while another is under a limit: the address check and the
  token's count of a request in one command. Only on one node — on a cluster the two counters may
  live on different shards (rateLimitPeek-1 and rateLimitHit-1 there, sent together).

  KEYS[1] counter peeked   ratelimit:<name>
  KEYS[2] counter hit      ratelimit:<name>
  ARGV[1] limit of the peeked counter
  ARGV[2] window of the hit counter (ms)

  Returns {1 = counted | 0 = refused, count, ms left in the window} of the counter it stopped at.

  Not written to the AOF nor sent to replicas (redis.set_repl): a counter is worth nothing after its
  minute, and with `appendfsync always` a write makes Redis fsync before it answers, so every
  admitted request would wait for the disk twice (here and at its create). A restart or a failover
  starts the affected windows afresh.
]]
redis.set_repl(redis.REPL_NONE)
local peeked = tonumber(redis.call('GET', KEYS[1]) or '0')
if peeked >= tonumber(ARGV[1]) then return {0, peeked, redis.call('PTTL', KEYS[1])} end
local count = redis.call('INCR', KEYS[2])
if count == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return {1, count, redis.call('PTTL', KEYS[2])}
