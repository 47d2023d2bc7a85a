--[[
  Sets fields of a webhook subscription that exists (a secret rotation, a disabling), never
  recreating one deleted meanwhile.

  KEYS[1] subscription   webhooks:{webhooks}:<id>
  ARGV    field, value pairs.

  Returns 0 when there is no such subscription, else 1.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
