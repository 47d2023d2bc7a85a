--[[
  Takes back one counted event, only from a window still open: a DECR of a counter that expired
  in between would create one below zero with no expiry.

  KEYS[1] counter   ratelimit:<name>

  Returns the count left.

  Not written to the AOF nor sent to replicas (redis.set_repl), as rateLimitAdmit-2 says why.
]]
redis.set_repl(redis.REPL_NONE)
if tonumber(redis.call('GET', KEYS[1]) or '0') <= 0 then return 0 end
return redis.call('DECR', KEYS[1])
