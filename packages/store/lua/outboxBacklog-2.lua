--[[
  What waits in a partition's outbox, for the metrics and the tests: the entries the relay has not
  acknowledged yet (pending at a consumer, or not delivered to any), the id of the oldest of them,
  and the entries in the partition's dead-letter stream. The outbox keeps relayed entries for the
  live event streams (see trimOutbox-n.lua): its length is no longer its backlog.

  KEYS[1] partition outbox        plants:{p<n>}:outbox
  KEYS[2] its dead-letter stream  plants:{p<n>}:outbox:dead
  ARGV[1] the consumer group
  ARGV[2] count undelivered entries up to this many when Redis does not know the group's lag

  Returns {entries not acknowledged, id of the oldest or false, dead letters}.
]]
local dead = redis.call('XLEN', KEYS[2])
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then return {0, false, dead} end
local found
for _, g in ipairs(groups) do
  local fields = {}
  for j = 1, #g, 2 do fields[g[j]] = g[j + 1] end
  if fields['name'] == ARGV[1] then found = fields end
end
if not found then
  -- No relay has read this partition yet: all of it waits.
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  return {redis.call('XLEN', KEYS[1]), first[1] and first[1][1] or false, dead}
end
local pending = tonumber(found['pending'])
local lastDelivered = found['last-delivered-id']
local undelivered = found['lag']
local firstUndelivered = redis.call('XRANGE', KEYS[1], '(' .. lastDelivered, '+', 'COUNT', 1)
if type(undelivered) ~= 'number' then
  -- Redis before 7, or a lag it cannot tell: count (bounded).
  if #firstUndelivered == 0 then undelivered = 0
  else undelivered = #redis.call('XRANGE', KEYS[1], '(' .. lastDelivered, '+', 'COUNT', tonumber(ARGV[2])) end
end
local oldest = false
if pending > 0 then
  oldest = redis.call('XPENDING', KEYS[1], ARGV[1])[2]
elseif firstUndelivered[1] then
  oldest = firstUndelivered[1][1]
end
return {pending + undelivered, oldest, dead}
