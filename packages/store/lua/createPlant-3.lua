--[[
  Commits a create atomically: the plant hash and its outbox entry are written together, or
  neither is. The worker relays the outbox into BullMQ, so side work can never be lost between
  the commit and an enqueue, whatever process dies when.

  The creation time is the partition's clock (includes/partitionClock: the master's TIME in µs,
  strictly increasing per partition).

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition clock   plants:{p<n>}:clock
  KEYS[3] partition outbox  plants:{p<n>}:outbox
  ARGV[1] plant id; ARGV[2] name; ARGV[3] '1' when a tag is given, else '0'; ARGV[4] tag;
  ARGV[5] actor; ARGV[6] request id; ARGV[7] ISO time; ARGV[8] (only when traced) the request's
  W3C traceparent, recorded with the event.

  The outbox entry is built here from the values (as update and delete do): every argument
  crosses the wire and is copied into Lua, so field names are not sent with each create.

  Returns {'created' | 'unchanged' | 'conflict', created µs, version µs}. 'unchanged' is an
  identical repeat (nothing written: retries are safe); 'conflict' another plant under the same
  id. The version is the time of the plant's latest change (see updatePlant-3): a new plant's is
  its creation time, not stored apart until an update.
]]
--- @include "partitionClock"
--- @include "plantEvent"

local existing = redis.call('HMGET', KEYS[1], 'name', 'tag', 'created', 'version')
if existing[1] then
  local sameTag = (ARGV[3] == '1' and existing[2] == ARGV[4]) or (ARGV[3] == '0' and not existing[2])
  local outcome = (existing[1] == ARGV[2] and sameTag) and 'unchanged' or 'conflict'
  return {outcome, existing[3], existing[4] or existing[3]}
end
local created = tickClock(KEYS[2])
local tag = ARGV[3] == '1' and ARGV[4] or nil
commitCreatedPlant(KEYS[1], KEYS[3], ARGV[1], ARGV[2], tag, created, ARGV[5], ARGV[6], ARGV[7], ARGV[8])
return {'created', created, created}
