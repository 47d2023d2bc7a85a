--[[
  Changes fields of a webhook subscription that exists (an edit, a secret rotation, a disabling or
  enabling), never recreating one deleted meanwhile; optionally only while one field still holds
  the value the change was computed from (a rotation builds the new secrets list from the one it
  read: two at once must not drop each other's secret).

  KEYS[1] subscription   webhooks:{webhooks}:<id>
  KEYS[2] version        webhooks:{webhooks}:version
  ARGV[1] the field the change depends on ('' for none), ARGV[2] the value it must still hold (an
  absent field holds ''); ARGV[3] a new version (random); ARGV[4] how many fields to remove
  (n), then those n fields; then field, value pairs to set.

  Returns 0 when there is no such subscription, 1 when the field no longer holds that value (read
  again and retry), else the subscription's fields after the change (HGETALL's pairs).
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] ~= '' and (redis.call('HGET', KEYS[1], ARGV[1]) or '') ~= ARGV[2] then return 1 end
local removed = tonumber(ARGV[4])
if removed > 0 then redis.call('HDEL', KEYS[1], unpack(ARGV, 5, 4 + removed)) end
if #ARGV > 4 + removed then redis.call('HSET', KEYS[1], unpack(ARGV, 5 + removed)) end
redis.call('SET', KEYS[2], ARGV[3])
return redis.call('HGETALL', KEYS[1])
