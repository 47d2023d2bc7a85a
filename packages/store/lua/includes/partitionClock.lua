--[[
  The partition's clock: the master's TIME in µs, kept strictly increasing per partition in its
  clock key (a failover to a replica whose clock is behind cannot reorder a partition's changes).
  Below 2^53 for the next 200 years: exact as a Lua number; formatted without exponent.
]]
local function clockNow()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- The next time on a clock whose last time is `last`: now, or just after `last`.
local function clockAfter(now, last)
  if now <= last then return last + 1 end
  return now
end

local function formatClock(time)
  return string.format('%.0f', time)
end

-- Advances the partition's clock (its key) and returns the new time as text.
local function tickClock(clockKey)
  local time = formatClock(clockAfter(clockNow(), tonumber(redis.call('GET', clockKey) or '0')))
  redis.call('SET', clockKey, time)
  return time
end
