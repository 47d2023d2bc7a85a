--[[
  Records how a batch's deliveries went, in one step: each record is replaced only while it is
  still listed (one dropped off the list or deleted with its subscription is not brought back).

  KEYS[1] records   webhooks:{webhooks}:delivery-records:<id> (hash: delivery id -> JSON)
  ARGV    pairs: delivery id, its record (JSON)

  Returns how many records were replaced.
]]
local replaced = 0
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    replaced = replaced + 1
  end
end
return replaced
