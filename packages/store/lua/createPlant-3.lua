--[[
  Commits a create atomically: the plant hash and its outbox entry are written together, or
  neither is. The worker relays the outbox into BullMQ, so side work can never be lost between
  the commit and an enqueue, whatever process dies when.

  The creation time is the partition master's clock (TIME, µs), kept strictly increasing per
  partition (a failover to a replica whose clock is behind cannot reorder a partition's plants).

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition clock   plants:{p<n>}:clock
  KEYS[3] partition outbox  plants:{p<n>}:outbox
  ARGV[1] plant id; ARGV[2] name; ARGV[3] '1' when a tag is given, else '0'; ARGV[4] tag;
  ARGV[5] actor; ARGV[6] request id; ARGV[7] ISO time.

  The outbox entry is built here from the values (as update and delete do): every argument
  crosses the wire and is copied into Lua, so field names are not sent with each create.

  Returns {'created' | 'unchanged' | 'conflict', created µs, version µs}. 'unchanged' is an
  identical repeat (nothing written: retries are safe); 'conflict' another plant under the same
  id. The version is the time of the plant's latest change (see updatePlant-3): a new plant's is
  its creation time, not stored apart until an update.
]]
local existing = redis.call('HMGET', KEYS[1], 'name', 'tag', 'created', 'version')
if existing[1] then
  local sameTag = (ARGV[3] == '1' and existing[2] == ARGV[4]) or (ARGV[3] == '0' and not existing[2])
  local outcome = (existing[1] == ARGV[2] and sameTag) and 'unchanged' or 'conflict'
  return {outcome, existing[3], existing[4] or existing[3]}
end
local now = redis.call('TIME')
-- Below 2^53 for the next 200 years: exact as a Lua number; formatted without exponent.
local created = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if created <= last then created = last + 1 end
created = string.format('%.0f', created)
redis.call('SET', KEYS[2], created)
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[2], 'tag', ARGV[4], 'created', created, 'at', ARGV[7])
  redis.call('XADD', KEYS[3], '*', 'created', created, 'type', 'plant.created', 'plantId', ARGV[1],
    'name', ARGV[2], 'tag', ARGV[4], 'actor', ARGV[5], 'requestId', ARGV[6], 'at', ARGV[7])
else
  redis.call('HSET', KEYS[1], 'name', ARGV[2], 'created', created, 'at', ARGV[7])
  redis.call('XADD', KEYS[3], '*', 'created', created, 'type', 'plant.created', 'plantId', ARGV[1],
    'name', ARGV[2], 'actor', ARGV[5], 'requestId', ARGV[6], 'at', ARGV[7])
end
return {'created', created, created}
