--[[
  Acknowledges relayed outbox entries and deletes them, in one step: the outbox holds only what is
  not relayed yet. One partition's outbox on a cluster; on one node every partition a relay round
  read, in one command.

  KEYS[1..n] partition outbox   plants:{p<n>}:outbox   (n: the call's first argument)
  ARGV[1]    the consumer group
  ARGV[1+i]  the entry ids of KEYS[i], separated by spaces

  Returns how many entries were deleted.
]]
local deleted = 0
for i = 1, #KEYS do
  local ids = {}
  for id in string.gmatch(ARGV[i + 1], '%S+') do ids[#ids + 1] = id end
  if #ids > 0 then
    redis.call('XACK', KEYS[i], ARGV[1], unpack(ids))
    deleted = deleted + redis.call('XDEL', KEYS[i], unpack(ids))
  end
end
return deleted
