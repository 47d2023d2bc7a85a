--[[
  Deletes a plant and records a `plant.deleted` outbox entry (with the removed plant's name, tag,
  creation time and version, so the worker can remove exactly that version from the read index),
  atomically.

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition outbox  plants:{p<n>}:outbox
  ARGV[1] plant id; ARGV[2] actor; ARGV[3] request id; ARGV[4] ISO time;
  ARGV[5] If-Match: '' (none), '*' (any current version) or versions separated by spaces (see
  updatePlant-3).

  Returns 1, 0 when there is no such plant, {-1, the plant's current version} when If-Match does
  not hold (nothing written: the client learns what to ask for).
]]
local plant = redis.call('HMGET', KEYS[1], 'name', 'tag', 'created', 'version')
if not plant[1] then return 0 end
if ARGV[5] and ARGV[5] ~= '' and ARGV[5] ~= '*' then
  local version = plant[4] or plant[3]
  local matched = false
  for expected in string.gmatch(ARGV[5], '%S+') do
    if expected == version then matched = true end
  end
  if not matched then return {-1, version} end
end
redis.call('DEL', KEYS[1])
local fields = {'type', 'plant.deleted', 'plantId', ARGV[1], 'name', plant[1]}
if plant[2] then
  fields[#fields + 1] = 'tag'
  fields[#fields + 1] = plant[2]
end
for _, pair in ipairs({{'actor', ARGV[2]}, {'requestId', ARGV[3]}, {'at', ARGV[4]}, {'created', plant[3]}, {'version', plant[4] or plant[3]}}) do
  fields[#fields + 1] = pair[1]
  fields[#fields + 1] = pair[2]
end
redis.call('XADD', KEYS[2], '*', unpack(fields))
return 1
