--[[
  Takes or keeps a lease: sets KEYS[1] to ARGV[1] for ARGV[2] ms when it is free or already
  ARGV[1]'s. A relay relays a partition only while it holds the partition's lease.

  KEYS[1] lease  plants:{p<n>}:relay
  ARGV[1] owner; ARGV[2] time to live (ms).

  Returns 1 when ARGV[1] holds the lease now, 0 when another owner does.
]]
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
