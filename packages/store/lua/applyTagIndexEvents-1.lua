--[[
  Applies plant versions to one bucket of a tag's read index, exactly once whatever the order in
  which their events arrive, and however often: a plant's tag changes with its updates, so an
  entry's presence in a tag's index depends on which update came last, not on which event the
  worker happened to process last.

  Each entry `{p<n>}:<id>@<created>` keeps, beside it in the same sorted set, the version (µs) of
  the last event applied to it in this tag: a record `{p<n>}:<id>@<created>#` scored -version
  (below every page, as the tombstones at -1). An event older than the record changes nothing,
  so a late or repeated create or update event cannot bring back a tag the plant no longer has.

  KEYS[1] bucket   plants:index:tag:<tag>:<bucket>
  ARGV    triples: member (`{p<n>}:<id>@<created>`), version (µs), and what the event says of
          the entry: 'in' (the plant has this tag since that version), 'out' (it no longer has it) or
          'gone' (the plant version was deleted: a tombstone, final).

  Returns the number of entries added to the bucket (for the directory: 0 means none).
]]
local added = 0
for i = 1, #ARGV, 3 do
  local member, version, state = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local record = member .. '#'
  local created = string.sub(member, string.find(member, '@', 1, true) + 1)
  if state == 'gone' then
    redis.call('ZADD', KEYS[1], -1, member)
    redis.call('ZREM', KEYS[1], record)
  elseif redis.call('ZSCORE', KEYS[1], member) ~= '-1' then
    local applied = -tonumber(redis.call('ZSCORE', KEYS[1], record) or '0')
    if applied < tonumber(version) then
      -- A create (its version is its creation time) needs no record: no event of it is older.
      -- Scores as text: Lua would write a number of 16 digits with 14.
      if version ~= created then redis.call('ZADD', KEYS[1], '-' .. version, record) end
      if state == 'in' then
        added = added + redis.call('ZADD', KEYS[1], created, member)
      else
        redis.call('ZREM', KEYS[1], member)
      end
    end
  end
end
return added
