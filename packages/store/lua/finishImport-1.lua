--[[
  Ends a running (or still queued) bulk import: `succeeded` once every line is judged, `failed`
  when its job gave up. An import that ended already (cancelled meanwhile) keeps its status.

  KEYS[1] import record   imports:{<id>}
  ARGV[1] 'succeeded' | 'failed'; ARGV[2] ISO time; ARGV[3] why it failed ('' otherwise)

  Returns the import's status, or false when there is no such import.
]]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if status ~= 'queued' and status ~= 'running' then return status end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'finishedAt', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'reason', ARGV[3]) end
return ARGV[1]
