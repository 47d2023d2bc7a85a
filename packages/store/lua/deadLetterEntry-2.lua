--[[
  Moves an unparseable outbox entry to the dead-letter stream and acknowledges + deletes it,
  atomically, so it is neither lost nor dead-lettered twice.

  KEYS[1] partition outbox       plants:{p<n>}:outbox
  KEYS[2] its dead-letter stream plants:{p<n>}:outbox:dead
  ARGV[1] consumer group; ARGV[2] entry id; ARGV[3] error text; ARGV[4] raw fields as JSON.
]]
redis.call('XADD', KEYS[2], '*', 'outboxId', ARGV[2], 'error', ARGV[3], 'fields', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
