--[[
  Records that a bulk import's chunk is done, in one step: the chunk leaves the upload, the
  counts and lines judged grow by the chunk's, its line errors join the first ones kept. A worker
  that dies before this step commits the chunk again (createPlants-n recognises its own creates),
  and a worker that dies after it goes on with the next chunk: every line is counted once.

  Only the chunk that follows the last one recorded is taken: a call for any other (a worker that
  lost the job to another) changes nothing. It is taken whatever the import's status, so the
  counts of a chunk committed while the import was being cancelled are kept: what was committed
  stays, and counted.

  KEYS[1] import record   imports:{<id>}
  KEYS[2] upload chunks   imports:{<id>}:chunks
  KEYS[3] line errors     imports:{<id>}:errors
  ARGV[1] the chunk's sequence number (0 for the first); ARGV[2] its lines; ARGV[3] created;
  ARGV[4] unchanged; ARGV[5] conflicts; ARGV[6] invalid; ARGV[7] most errors kept; ARGV[8…] the
  chunk's line errors (JSON), in line order.

  Returns {1 | 0 (taken or not), the import's status, the next chunk (false when none is left)}:
  the worker goes on with it without another round trip.
]]
local done = tonumber(redis.call('HGET', KEYS[1], 'chunksDone') or '-1')
local status = redis.call('HGET', KEYS[1], 'status') or 'missing'
if done ~= tonumber(ARGV[1]) then return {0, status, false} end
redis.call('LPOP', KEYS[2])
redis.call('HSET', KEYS[1], 'chunksDone', done + 1)
redis.call('HINCRBY', KEYS[1], 'lines', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'created', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'unchanged', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'conflicts', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'invalid', ARGV[6])
local room = tonumber(ARGV[7]) - redis.call('LLEN', KEYS[3])
for i = 8, math.min(#ARGV, 7 + room) do
  redis.call('RPUSH', KEYS[3], ARGV[i])
end
return {1, status, redis.call('LINDEX', KEYS[2], 0)}
