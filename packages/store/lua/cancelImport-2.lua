--[[
  Cancels a queued or running bulk import: its status becomes `cancelled` and what is left of its
  upload is dropped. What it committed stays (and a chunk being committed now is still counted,
  see checkpointImport-3); its worker stops at the next chunk.

  KEYS[1] import record   imports:{<id>}
  KEYS[2] upload chunks   imports:{<id>}:chunks
  ARGV[1] ISO time

  Returns the status before the call, or false when there is no such import.
]]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finishedAt', ARGV[1])
  redis.call('DEL', KEYS[2])
end
return status
