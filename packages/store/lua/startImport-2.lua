--[[
  A worker takes up a bulk import: a queued one becomes running (its start time set once); a
  running one (taken up again after a worker died) stays so. The upload was stored with an expiry
  that only the api's confirmation lifts; lifted here too, in case the api died in between.

  KEYS[1] import record   imports:{<id>}
  KEYS[2] upload chunks   imports:{<id>}:chunks
  ARGV[1] ISO time

  Returns the import's status, or false when there is no such import (its upload expired).
]]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
if status == 'queued' then
  status = 'running'
  redis.call('HSET', KEYS[1], 'status', status, 'startedAt', ARGV[1])
end
return status
