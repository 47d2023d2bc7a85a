--[[
  Trims relayed entries from partitions' outboxes (the store's event log and audit log) once they
  are out of the retention window: older than ARGV[2] (ms on the store's clock), or beyond the
  newest ARGV[3] entries of their partition (the worker keeps the audit retention, uncapped). Never an entry the relay's consumer group has not delivered and
  acknowledged: nothing at or after the oldest pending entry, nothing after the group's
  last-delivered id, nothing at all in a stream without the group. Exact (not `~`) trimming, and
  the id of the last entry removed is recorded in the partition's `outbox:trimmed` key: a live
  stream's cursor before it is expired (something after it may be gone), one at or after it is not.

  KEYS[2i-1] partition outbox       plants:{p<n>}:outbox          (2n keys: the call's first argument)
  KEYS[2i]   its last trimmed id    plants:{p<n>}:outbox:trimmed
  ARGV[1] the consumer group
  ARGV[2] keep entries from this ms on (now - retention)
  ARGV[3] keep at most this many entries per partition
  ARGV[4] remove at most this many entries per partition in this call (bounds the call's work)

  Returns how many entries were removed.
]]
local group = ARGV[1]
local keepFromMs = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local maxRemoved = tonumber(ARGV[4])

local function parse(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
-- The id right after `id`: MINID keeps it and everything later.
local function after(id)
  local ms, seq = parse(id)
  return string.format('%.0f-%.0f', ms, seq + 1)
end

local removed = 0
for i = 1, #KEYS, 2 do
  local stream, marker = KEYS[i], KEYS[i + 1]
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  local lastDelivered
  if ok then
    for _, g in ipairs(groups) do
      local name, last
      for j = 1, #g, 2 do
        if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then last = g[j + 1] end
      end
      if name == group then lastDelivered = last end
    end
  end
  if lastDelivered then
    -- Below `safe`: delivered and acknowledged.
    local safe
    local pending = redis.call('XPENDING', stream, group)
    if tonumber(pending[1]) > 0 then safe = pending[2] else safe = after(lastDelivered) end
    local bound = string.format('%.0f-0', keepFromMs)
    local length = redis.call('XLEN', stream)
    if length > cap then
      local over = redis.call('XRANGE', stream, '-', '+', 'COUNT', math.min(length - cap, maxRemoved))
      if #over > 0 then
        local countBound = after(over[#over][1])
        if less(bound, countBound) then bound = countBound end
      end
    end
    if less(safe, bound) then bound = safe end
    -- At most maxRemoved entries: the last of the first maxRemoved bounds the trim.
    local head = redis.call('XRANGE', stream, '-', '(' .. bound, 'COUNT', maxRemoved)
    if #head > 0 then
      local last = head[#head][1]
      redis.call('SET', marker, last)
      removed = removed + redis.call('XTRIM', stream, 'MINID', after(last))
    end
  end
end
return removed
