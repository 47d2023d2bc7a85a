--[[
  Appends one audit entry per outbox event, however often the job runs: the recorded hash
  (event id → audit entry id) is checked and set in the same script as the XADD.

  The marker is written only after the XADD succeeded: Redis does not roll back a script that
  fails half-way, and a marker without its entry would make every retry skip the event.

  KEYS[1] recorded hash  plants:{p<n>}:audit:recorded
  KEYS[2] audit stream   plants:{p<n>}:audit
  ARGV[1] event id; ARGV[2...] the audit entry's fields (pairs).

  Returns {1 | 0 (newly appended or not), audit entry id}.
]]
local existing = redis.call('HGET', KEYS[1], ARGV[1])
if existing then
  return {0, existing}
end
local fields = {'eventId', ARGV[1]}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local entryId = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('HSETNX', KEYS[1], ARGV[1], entryId)
return {1, entryId}
