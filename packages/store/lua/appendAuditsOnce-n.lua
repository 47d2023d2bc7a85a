--[[
  Appends one audit entry per outbox event, however often the job runs: each event's exactly-once
  record (event id → audit entry id) is checked and set in the same script as its XADD. Several
  events per call, so a job's batch costs one call per slot, not one per event: on a cluster the
  events of one partition, on one node those of every partition.

  Records live in one hash per partition and UTC day of the event's commit (the day of the event
  id's ms), which expires once `ARGV[1]` ms have passed since its latest record: the records of
  events that can no longer be redelivered go away by themselves (see src/audit.ts for why the
  window is safe). The hash of the records made before they expired (one per partition, never
  written any more, emptied by the worker's retention pass) is read too, so an event recorded
  before the upgrade is not appended again.

  An event's record is written only after its XADD succeeded, and a day's hash gets its expiry
  right after its first record of the call: Redis does not roll back a script that fails half-way,
  and a record without its entry would make every retry skip the event; the events before the
  failure are recorded and skipped by the retry.

  KEYS  triples, one per (partition, day) of the call's events (n = 3 × triples):
        KEYS[3t-2] the day's records   plants:{p<n>}:audit:recorded:<YYYY-MM-DD>
        KEYS[3t-1] earlier records     plants:{p<n>}:audit:recorded (read only)
        KEYS[3t]   audit stream        plants:{p<n>}:audit
  ARGV[1] the records' lifetime after the latest (ms); ARGV[2] renew that lifetime when less than
  this remains (ms; saves a write per append); then per event: its triple's number t, the event
  id, the number of field values k, and the audit entry's k field values (pairs).

  Returns, per event in order, 1 | 0 (newly appended or not) and the audit entry id.
]]
local out = {}
local expiryChecked = {}
local argc = #ARGV
local i = 3
while i <= argc do
  local t, eventId, count = tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 2])
  local dayRecords = KEYS[3 * t - 2]
  local existing = redis.call('HGET', dayRecords, eventId) or redis.call('HGET', KEYS[3 * t - 1], eventId)
  if existing then
    out[#out + 1] = 0
    out[#out + 1] = existing
  else
    -- The entry's fields straight from ARGV (no table per event).
    local entryId = redis.call('XADD', KEYS[3 * t], '*', 'eventId', eventId, unpack(ARGV, i + 3, i + 2 + count))
    redis.call('HSET', dayRecords, eventId, entryId)
    -- PTTL is -1 while the hash has no expiry yet (its first record): below any threshold.
    if not expiryChecked[t] then
      expiryChecked[t] = true
      if redis.call('PTTL', dayRecords) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', dayRecords, ARGV[1])
      end
    end
    out[#out + 1] = 1
    out[#out + 1] = entryId
  end
  i = i + 3 + count
end
return out
