--[[
  Removes fields of a webhook subscription that exists (re-enabling one), never recreating one
  deleted meanwhile.

  KEYS[1] subscription   webhooks:{webhooks}:<id>
  KEYS[2] change count   webhooks:{webhooks}:changes
  ARGV    the fields to remove.

  Returns 0 when there is no such subscription, else its fields after the change (HGETALL's pairs).
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[1], unpack(ARGV))
redis.call('INCR', KEYS[2])
return redis.call('HGETALL', KEYS[1])
