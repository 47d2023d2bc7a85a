--[[
  Claims a batch delivery's events for it, and lists them as the subscription's deliveries: each
  event's delivery is claimed by the first batch that names it (a relay that queued an event in
  two batches gets it delivered once), and stays its own while pending (a batch run again after a
  crash delivers what it had not settled). The fan-out claims when it queues the batch (so the
  deliveries are listed at once), the batch again when it runs (in case the fan-out stopped in
  between). Nothing is claimed for a deleted subscription.

  KEYS[1] subscription   webhooks:{webhooks}:<id>
  KEYS[2] delivery list  webhooks:{webhooks}:deliveries:<id>     (zset: delivery id by queued ms)
  KEYS[3] records        webhooks:{webhooks}:delivery-records:<id> (hash: delivery id -> JSON)
  ARGV[1] the batch id; ARGV[2] how many deliveries are listed (the oldest beyond drop off, with
  their records); then for each event: its delivery id, queued ms, event type.

  Returns the delivery ids the batch owns that are still pending.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local batch = ARGV[1]
local owned = {}
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  local stored = redis.call('HGET', KEYS[3], id)
  if not stored then
    local record = { batch = batch, type = ARGV[i + 2], queuedMs = tonumber(ARGV[i + 1]), state = 'pending' }
    redis.call('HSET', KEYS[3], id, cjson.encode(record))
    redis.call('ZADD', KEYS[2], ARGV[i + 1], id)
    owned[#owned + 1] = id
  else
    local record = cjson.decode(stored)
    if record.batch == batch and record.state == 'pending' then owned[#owned + 1] = id end
  end
end
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[2])
while excess > 0 do
  local dropped = redis.call('ZRANGE', KEYS[2], 0, math.min(excess, 1000) - 1)
  redis.call('ZREM', KEYS[2], unpack(dropped))
  redis.call('HDEL', KEYS[3], unpack(dropped))
  excess = excess - #dropped
end
return owned
