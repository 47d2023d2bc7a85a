--[[
  The head of a read-index walk in one command (one node; on a cluster the directory and the
  bucket live in different slots and are read side by side): the directory's buckets from a
  bucket on and, when the first of them is the bucket expected, that bucket's entries after the
  walk's position.

  KEYS[1] directory   plants:index:<all | tag:…>:buckets
  KEYS[2] bucket      plants:index:<all | tag:…>:<bucket>   (the one expected first)
  ARGV[1] first bucket to list
  ARGV[2] buckets to list at most
  ARGV[3] the expected bucket (KEYS[2]'s number)
  ARGV[4] position: creation time (µs), or '' from the start
  ARGV[5] position: member
  ARGV[6] entries to read after the position's ties

  Returns {buckets, entries}: entries are the members (`<id>@<created>`, which holds the score) of
  the position's ties (equal creation time, member after its member) then up to ARGV[6] more,
  joined by spaces into one string (one reply element, not one per entry: the client's cost is per
  element); false when the first bucket listed is not the one expected.
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
return {buckets, table.concat(entries, ' ')}
