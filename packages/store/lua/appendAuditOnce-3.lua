--[[
  Appends one audit entry per outbox event, however often the job runs: the event's exactly-once
  record (event id → audit entry id) is checked and set in the same script as the XADD.

  Records live in one hash per partition and UTC day of the event's commit (the day of the event
  id's ms), which expires once `ARGV[2]` ms have passed since its latest record: the records of
  events that can no longer be redelivered go away by themselves (see src/audit.ts for why the
  window is safe). The hash of the records made before they expired (one per partition, never
  written any more, emptied by the worker's retention pass) is read too, so an event recorded
  before the upgrade is not appended again.

  The record is written only after the XADD succeeded: Redis does not roll back a script that
  fails half-way, and a record without its entry would make every retry skip the event.

  KEYS[1] the day's records   plants:{p<n>}:audit:recorded:<YYYY-MM-DD>
  KEYS[2] earlier records     plants:{p<n>}:audit:recorded (read only)
  KEYS[3] audit stream        plants:{p<n>}:audit
  ARGV[1] event id; ARGV[2] the records' lifetime after the latest (ms); ARGV[3] renew that
  lifetime when less than this remains (ms; saves a write per append); ARGV[4...] the audit
  entry's fields (pairs).

  Returns {1 | 0 (newly appended or not), audit entry id}.
]]
local existing = redis.call('HGET', KEYS[1], ARGV[1]) or redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  return {0, existing}
end
local fields = {'eventId', ARGV[1]}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local entryId = redis.call('XADD', KEYS[3], '*', unpack(fields))
redis.call('HSET', KEYS[1], ARGV[1], entryId)
-- PTTL is -1 while the hash has no expiry yet (its first record): below any threshold.
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, entryId}
