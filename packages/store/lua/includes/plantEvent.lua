--[[
  A plant's outbox entry (the event the relay, the live streams and the audit log read), its fields
  in one order for every type: its type, the plant's id, name and tag (nil: none), what the type
  adds (`previous`: an update's old name and tag, {field, value} pairs, a nil value left out), the
  request's actor, request id and time, the plant version's creation time and version (nil
  for a create, whose version is its creation time), and the request's W3C traceparent (nil: not
  traced).
]]
local function appendPlantEvent(outboxKey, type, id, name, tag, previous, actor, requestId, at, created, version,
    traceparent)
  local fields = {'type', type, 'plantId', id, 'name', name}
  local function add(field, value)
    if value then
      fields[#fields + 1] = field
      fields[#fields + 1] = value
    end
  end
  add('tag', tag)
  for _, pair in ipairs(previous) do add(pair[1], pair[2]) end
  add('actor', actor)
  add('requestId', requestId)
  add('at', at)
  add('created', created)
  add('version', version)
  add('traceparent', traceparent)
  redis.call('XADD', outboxKey, '*', unpack(fields))
end

-- Writes a new plant's hash and its `plant.created` entry: the commit of a create. An untraced
-- create's fields are passed to XADD as they are (no table, no unpack): creates are the hot path.
-- A traced one's entry is built by appendPlantEvent, in the same field order, its traceparent last.
local function commitCreatedPlant(plantKey, outboxKey, id, name, tag, created, actor, requestId, at, traceparent)
  if tag then
    redis.call('HSET', plantKey, 'name', name, 'tag', tag, 'created', created, 'at', at)
  else
    redis.call('HSET', plantKey, 'name', name, 'created', created, 'at', at)
  end
  if traceparent then
    appendPlantEvent(outboxKey, 'plant.created', id, name, tag, {}, actor, requestId, at, created, nil, traceparent)
  elseif tag then
    redis.call('XADD', outboxKey, '*', 'type', 'plant.created', 'plantId', id, 'name', name, 'tag', tag,
      'actor', actor, 'requestId', requestId, 'at', at, 'created', created)
  else
    redis.call('XADD', outboxKey, '*', 'type', 'plant.created', 'plantId', id, 'name', name,
      'actor', actor, 'requestId', requestId, 'at', at, 'created', created)
  end
end
