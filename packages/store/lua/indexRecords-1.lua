--[[
  Applies a batch of a resource's events to its index in one partition (resources.ts): a sorted set
  of the partition's record ids, each scored by the version of the latest event seen for it,
  negative once that event is a delete (a tombstone). An event changes a member only when it is
  later than the one the member holds, so batches may be applied in any order and again: the set
  ends the same, a deleted record unlisted.

  KEYS[1] the index   <resource>:{p<n>}:index
  ARGV: per event its id, then its version (µs), negative for a delete.

  Returns how many members changed.
]]
local changed = 0
for i = 1, #ARGV, 2 do
  local id, version = ARGV[i], tonumber(ARGV[i + 1])
  local current = tonumber(redis.call('ZSCORE', KEYS[1], id) or '0')
  if math.abs(version) > math.abs(current) then
    redis.call('ZADD', KEYS[1], version, id)
    changed = changed + 1
  end
end
return changed
