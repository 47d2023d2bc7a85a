--[[
  Reads a fixed-window counter without counting.

  KEYS[1] counter   ratelimit:<name>

  Returns {count, ms left in the window (negative when there is none)}.
]]
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
return {count, redis.call('PTTL', KEYS[1])}
