--[[
  Commits a change of a record of any resource (resources.ts's resourceRecords: resources without
  scripts of their own) atomically with its outbox entry, as createPlant-3 does for a plant: the
  record's hash and the event are written together, or neither is.

  KEYS[1] record hash       <resource>:{p<n>}:<id>
  KEYS[2] partition clock   plants:{p<n>}:clock
  KEYS[3] partition outbox  plants:{p<n>}:outbox
  ARGV[1] the change: 'create' (only if there is none), 'update' (only if there is one) or 'delete'
  ARGV[2] its event type (<resource>.<verb>); ARGV[3] the record's id
  ARGV[4] actor; ARGV[5] request id; ARGV[6] ISO time
  ARGV[7…] the record's fields, name then value (create, update: an update replaces them all)

  The event carries the type, the id, the record's fields (a delete's: those it had), the request's
  actor, id and time, and the version: the partition clock's time of the change (µs, see
  includes/partitionClock), also kept in the hash.

  Returns {outcome, version}: 'created' or 'exists' (nothing written, the current version);
  'updated', 'deleted' or 'missing' (nothing written, no version).
]]
--- @include "partitionClock"

local change = ARGV[1]
local current = redis.call('HGET', KEYS[1], 'version')
if change == 'create' and current then return {'exists', current} end
if change ~= 'create' and not current then return {'missing'} end

local fields = {}
if change == 'delete' then
  local stored = redis.call('HGETALL', KEYS[1])
  for i = 1, #stored, 2 do
    if stored[i] ~= 'version' then
      fields[#fields + 1] = stored[i]
      fields[#fields + 1] = stored[i + 1]
    end
  end
  redis.call('DEL', KEYS[1])
else
  for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
end

local version = tickClock(KEYS[2])
if change ~= 'delete' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'version', version, unpack(fields))
end
local entry = {'type', ARGV[2], 'id', ARGV[3]}
for i = 1, #fields do entry[#entry + 1] = fields[i] end
for _, pair in ipairs({{'actor', ARGV[4]}, {'requestId', ARGV[5]}, {'at', ARGV[6]}, {'version', version}}) do
  entry[#entry + 1] = pair[1]
  entry[#entry + 1] = pair[2]
end
redis.call('XADD', KEYS[3], '*', unpack(entry))
return {change == 'create' and 'created' or change == 'update' and 'updated' or 'deleted', version}
