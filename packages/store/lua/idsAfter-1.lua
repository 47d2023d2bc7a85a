--[[
  A page of ids in creation order (a sorted set scored by creation time), after a given one: the
  position is looked up and the page read in one step, so an id added meanwhile cannot shift the
  page by one. The token listing and the import listing page with it.

  KEYS[1] id list   e.g. tokens:{tokens}:ids, imports:ids
  ARGV[1] the id the page follows ('' for the first page); ARGV[2] how many ids at most.

  Returns the ids, or -1 when ARGV[1] is not an id of the list.
]]
local start = 0
if ARGV[1] ~= '' then
  local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
  if not rank then return -1 end
  start = rank + 1
end
return redis.call('ZRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
