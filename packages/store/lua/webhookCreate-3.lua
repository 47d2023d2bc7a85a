--[[
  Stores a new webhook subscription while there are fewer than the limit, in one step: two admins
  subscribing at once cannot both take the last place.

  KEYS[1] subscription   webhooks:{webhooks}:<id>
  KEYS[2] id list        webhooks:{webhooks}:ids
  KEYS[3] version        webhooks:{webhooks}:version
  ARGV[1] the most subscriptions kept; ARGV[2] the id; ARGV[3] created (ms, the list's score);
  ARGV[4] a new version (random); then field, value pairs.

  Returns 1 when stored, 0 when the limit is reached (nothing written).
]]
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('SET', KEYS[3], ARGV[4])
return 1
