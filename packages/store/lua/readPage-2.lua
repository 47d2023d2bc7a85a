--[[
  The head of a list page in one command, on one node (on a cluster the directory, the bucket
  and the plants live in different slots and are read side by side): the directory's buckets
  from a bucket on and, when the first of them is the bucket expected, that bucket's entries
  after the walk's position together with their plants' name and tag.

  KEYS[1] directory   plants:index:<all | tag:…>:buckets
  KEYS[2] bucket      plants:index:<all | tag:…>:<bucket>   (the one expected first)
  Derived keys, one node only: plant:{p<n>}:<id> of each entry read, which the entry's member
  (`{p<n>}:<id>@<created>`) names. Reading them here, not in a second command, saves a round trip
  per page: a round trip on a node that fsyncs every write waits behind other clients' fsyncs.
  ARGV[1] first bucket to list
  ARGV[2] buckets to list at most
  ARGV[3] the expected bucket (KEYS[2]'s number)
  ARGV[4] position: creation time (µs), or '' from the start
  ARGV[5] position: member
  ARGV[6] entries to read after the position's ties

  Returns {buckets, entries, plants}: entries are the members (`{p<n>}:<id>@<created>`, which
  hold the score) of the position's ties (equal creation time, member after its member) then up to
  ARGV[6] more, joined by spaces into one string (one reply element, not one per entry: the
  client's cost is per element); plants is one JSON string [name, tag or false, …] in entry
  order, name false where the plant is gone or is another version than the entry's (deleted, or
  deleted and created again, before the worker caught up). {buckets, false} when the first
  bucket listed is not the one expected.
]]
local buckets = redis.call('ZRANGE', KEYS[1], ARGV[1], '+inf', 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
if buckets[1] ~= ARGV[3] then return {buckets, false} end
local entries = {}
local from = '0'
if ARGV[4] ~= '' then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], ARGV[4], ARGV[4], 'BYSCORE')) do
    if member > ARGV[5] then entries[#entries + 1] = member end
  end
  from = '(' .. ARGV[4]
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], from, '+inf', 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[6]))) do
  entries[#entries + 1] = member
end

local find, sub = string.find, string.sub
local plants = {}
for _, member in ipairs(entries) do
  local at = find(member, '@', 1, true)
  local plant = redis.call('HMGET', 'plant:' .. sub(member, 1, at - 1), 'name', 'tag', 'created')
  if plant[1] and plant[3] == sub(member, at + 1) then
    plants[#plants + 1] = plant[1]
    plants[#plants + 1] = plant[2]
  else
    plants[#plants + 1] = false
    plants[#plants + 1] = false
  end
end
return {buckets, table.concat(entries, ' '), cjson.encode(plants)}
