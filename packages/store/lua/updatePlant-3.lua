--[[
  Commits an update (a PUT's replacement or a PATCH's merge) atomically: the plant's new name and
  tag, its new version and a `plant.updated` outbox entry (old and new name and tag) are written
  together, or nothing is. The version is the partition clock's time of the write (µs, strictly
  increasing per partition, as a create's): it orders a plant's updates and tells one state of
  the plant from every other, also across a delete and a create under the same id.

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition clock   plants:{p<n>}:clock
  KEYS[3] partition outbox  plants:{p<n>}:outbox
  ARGV[1] plant id
  ARGV[2] If-Match: '' (none), '*' (any current version), or versions separated by spaces
  ARGV[3] new name, or '' to keep the name (a name is never empty)
  ARGV[4] tag: 'keep', 'set' (to ARGV[5]) or 'remove'
  ARGV[5] new tag (with 'set')
  ARGV[6] actor; ARGV[7] request id; ARGV[8] ISO time
  ARGV[9] (only when traced) the request's W3C traceparent, recorded with the event

  Returns {outcome, version, created, name, tag or false}: outcome 'updated', 'unchanged' (the request
  changes nothing: nothing is written, no event), 'mismatch' (If-Match does not hold: nothing is
  written; the current state is returned) or 'missing' (no such plant: only the outcome).
]]
--- @include "partitionClock"
--- @include "plantEvent"
--- @include "ifMatch"

local plant = redis.call('HMGET', KEYS[1], 'name', 'tag', 'created', 'version')
if not plant[1] then return {'missing'} end
local version = plant[4] or plant[3]
if not ifMatchHolds(ARGV[2], version) then return {'mismatch', version, plant[3], plant[1], plant[2] or false} end

-- HMGET gives false for a missing tag: nil stands for "no tag" below, in the old state and the new.
local oldTag = plant[2] or nil
local name = ARGV[3] ~= '' and ARGV[3] or plant[1]
local tag = oldTag
if ARGV[4] == 'set' then tag = ARGV[5] elseif ARGV[4] == 'remove' then tag = nil end
if name == plant[1] and tag == oldTag then return {'unchanged', version, plant[3], plant[1], oldTag or false} end

local newVersion = tickClock(KEYS[2])
redis.call('HSET', KEYS[1], 'name', name, 'version', newVersion)
if tag then redis.call('HSET', KEYS[1], 'tag', tag) else redis.call('HDEL', KEYS[1], 'tag') end
appendPlantEvent(KEYS[3], 'plant.updated', ARGV[1], name, tag, {{'previousName', plant[1]}, {'previousTag', oldTag}},
  ARGV[6], ARGV[7], ARGV[8], plant[3], newVersion, ARGV[9])
return {'updated', newVersion, plant[3], name, tag or false}
