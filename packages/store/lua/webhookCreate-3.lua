--[[
  Stores a new webhook subscription while there are fewer than the limit, in one step: two admins
  subscribing at once cannot both take the last place.

  KEYS[1] subscription   webhooks:{webhooks}:<id>
  KEYS[2] id list        webhooks:{webhooks}:ids
  KEYS[3] change count   webhooks:{webhooks}:changes
  ARGV[1] the most subscriptions kept; ARGV[2] the id; ARGV[3] created (ms, the list's score);
  then field, value pairs.

  Returns 1 when stored, 0 when the limit is reached (nothing written).
]]
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('INCR', KEYS[3])
return 1
