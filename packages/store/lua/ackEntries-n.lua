--[[
  Acknowledges relayed outbox entries. The entries stay in the stream: the outbox is also the
  store's event log, which the api's live event streams read and resume from (see
  trimOutbox-n.lua for how long an entry stays). One partition's outbox on a cluster; on one node
  every partition a relay round read, in one command.

  KEYS[1..n] partition outbox   plants:{p<n>}:outbox   (n: the call's first argument)
  ARGV[1]    the consumer group
  ARGV[1+i]  the entry ids of KEYS[i], separated by spaces

  Returns how many entries were acknowledged.
]]
local acked = 0
for i = 1, #KEYS do
  local ids = {}
  for id in string.gmatch(ARGV[i + 1], '%S+') do ids[#ids + 1] = id end
  if #ids > 0 then
    acked = acked + redis.call('XACK', KEYS[i], ARGV[1], unpack(ids))
  end
end
return acked
