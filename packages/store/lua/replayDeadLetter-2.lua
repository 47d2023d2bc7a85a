--[[
  Puts a dead-lettered outbox entry back into its partition's outbox (a new entry with the
  fields it had) and removes the dead letter, atomically: neither lost nor doubled, however
  often the replay is run.

  KEYS[1] partition outbox       plants:{p<n>}:outbox
  KEYS[2] its dead-letter stream plants:{p<n>}:outbox:dead
  ARGV[1] the dead letter's entry id.

  Returns the new outbox entry id, or false when there is no such dead letter (replayed already).
]]
local found = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #found == 0 then
  return false
end
local raw
local fields = found[1][2]
for i = 1, #fields, 2 do
  if fields[i] == 'fields' then raw = fields[i + 1] end
end
if not raw then
  return redis.error_reply('ERR dead letter ' .. ARGV[1] .. ' holds no fields to replay')
end
local entryId = redis.call('XADD', KEYS[1], '*', unpack(cjson.decode(raw)))
redis.call('XDEL', KEYS[2], ARGV[1])
return entryId
