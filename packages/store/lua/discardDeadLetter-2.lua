--[[
  Discards a dead letter an operator gave up on (its side work will never be done) and records
  that in the partition's audit log, atomically: the dead letter goes only with its audit entry,
  and a second discard finds nothing and writes nothing.

  KEYS[1] the dead-letter stream  plants:{p<n>}:outbox:dead
  KEYS[2] the partition's audit   plants:{p<n>}:audit
  ARGV[1] the dead letter's entry id; ARGV[2…] the audit entry's field values (pairs).

  Returns the audit entry id, or false when there is no such dead letter (discarded or replayed).
]]
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then
  return false
end
local auditEntryId = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
redis.call('XDEL', KEYS[1], ARGV[1])
return auditEntryId
