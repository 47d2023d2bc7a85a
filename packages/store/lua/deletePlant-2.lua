--[[
  Deletes a plant and records a `plant.deleted` outbox entry (with the removed plant's name, tag,
  creation time and version, so the worker can remove exactly that version from the read index),
  atomically.

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition outbox  plants:{p<n>}:outbox
  ARGV[1] plant id; ARGV[2] actor; ARGV[3] request id; ARGV[4] ISO time;
  ARGV[5] If-Match: '' (none), '*' (any current version) or versions separated by spaces (see
  updatePlant-3); ARGV[6] (only when traced) the request's W3C traceparent, recorded with the event.

  Returns 1, 0 when there is no such plant, {-1, the plant's current version} when If-Match does
  not hold (nothing written: the client learns what to ask for).
]]
--- @include "plantEvent"
--- @include "ifMatch"

local plant = redis.call('HMGET', KEYS[1], 'name', 'tag', 'created', 'version')
if not plant[1] then return 0 end
local version = plant[4] or plant[3]
if not ifMatchHolds(ARGV[5], version) then return {-1, version} end
redis.call('DEL', KEYS[1])
appendPlantEvent(KEYS[2], 'plant.deleted', ARGV[1], plant[1], plant[2] or nil, {}, ARGV[2], ARGV[3], ARGV[4],
  plant[3], version, ARGV[6])
return 1
