--[[
  Gives a lease up, only when ARGV[1] still holds it.

  KEYS[1] lease  plants:{p<n>}:relay
  ARGV[1] owner.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
