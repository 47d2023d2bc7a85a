--[[
  createPlant(plantKey, clockKey, outboxKey, id, name, hasTag, tag, actor, requestId, at): commits a
  create atomically — the plant hash and its outbox entry are written together, or neither is. The
  worker relays the outbox into BullMQ, so side work can never be lost between the commit and an
  enqueue, whatever process dies when.

  The creation time is the partition master's clock (TIME, µs), kept strictly increasing per
  partition (a failover to a replica whose clock is behind cannot reorder a partition's plants).

  The outbox entry is built here from the values (as update and delete do): every argument
  crosses the wire and is copied into Lua, so field names are not sent with each create.

  Returns {'created' | 'unchanged' | 'conflict', created µs, version µs}. 'unchanged' is an
  identical repeat (nothing written: retries are safe); 'conflict' another plant under the same
  id. The version is the time of the plant's latest change (see updatePlant-3): a new plant's is
  its creation time, not stored apart until an update.
]]
local function createPlant(plantKey, clockKey, outboxKey, id, name, hasTag, tag, actor, requestId, at)
  local existing = redis.call('HMGET', plantKey, 'name', 'tag', 'created', 'version')
  if existing[1] then
    local sameTag = (hasTag == '1' and existing[2] == tag) or (hasTag == '0' and not existing[2])
    local outcome = (existing[1] == name and sameTag) and 'unchanged' or 'conflict'
    return {outcome, existing[3], existing[4] or existing[3]}
  end
  local now = redis.call('TIME')
  -- Below 2^53 for the next 200 years: exact as a Lua number; formatted without exponent.
  local created = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('GET', clockKey) or '0')
  if created <= last then created = last + 1 end
  created = string.format('%.0f', created)
  redis.call('SET', clockKey, created)
  if hasTag == '1' then
    redis.call('HSET', plantKey, 'name', name, 'tag', tag, 'created', created, 'at', at)
    redis.call('XADD', outboxKey, '*', 'created', created, 'type', 'plant.created', 'plantId', id,
      'name', name, 'tag', tag, 'actor', actor, 'requestId', requestId, 'at', at)
  else
    redis.call('HSET', plantKey, 'name', name, 'created', created, 'at', at)
    redis.call('XADD', outboxKey, '*', 'created', created, 'type', 'plant.created', 'plantId', id,
      'name', name, 'actor', actor, 'requestId', requestId, 'at', at)
  end
  return {'created', created, created}
end
