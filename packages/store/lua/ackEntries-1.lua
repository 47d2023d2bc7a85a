--[[
  Acknowledges relayed outbox entries and deletes them, in one step: the outbox holds only what is
  not relayed yet.

  KEYS[1] partition outbox  plants:{p<n>}:outbox
  ARGV[1] the consumer group; ARGV[2...] the entry ids.

  Returns how many entries were deleted.
]]
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
