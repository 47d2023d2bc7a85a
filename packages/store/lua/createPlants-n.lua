#!lua
--[[
  Commits the plants of one bulk-import chunk that live in one partition, each exactly as
  createPlant-3 commits a POST: a new plant's hash and its `plant.created` outbox entry together
  (the relay then indexes, audits and fans it out like any other), an identical plant already
  there left as it is ('unchanged'), a different one under the id left as it is ('conflict').

  Exactly once across a crash: the lines this chunk created in the partition are recorded in the
  import's record of the partition (KEYS[3], in the same slot, written in the same script). The
  worker checkpoints the import after the chunk; a worker that died before that commits the chunk
  again, and a line recorded here is then 'created' again without writing anything: it is neither
  counted 'unchanged' nor committed twice, even when the plant was changed or deleted meanwhile.
  The record holds one chunk at a time: a call for a later chunk empties it first, and a call for
  an earlier chunk than the one recorded (a worker that lost the job to another) writes nothing
  and returns 'stale'.

  KEYS[1] partition clock   plants:{p<n>}:clock
  KEYS[2] partition outbox  plants:{p<n>}:outbox
  KEYS[3] import record     plants:{p<n>}:imported:<import id>
  KEYS[4…] one plant hash per line, in line order   plant:{p<n>}:<id>
  ARGV[1] the chunk's sequence number; ARGV[2] actor; ARGV[3] request id (of the upload);
  ARGV[4] ISO time; ARGV[5] the record's lifetime (ms); then per line 5 values: line number, plant
  id, name, '1' when a tag is given else '0', tag.

  Past Redis's maxmemory the call is refused whole with OOM before it runs: the `#!lua` line (no
  flags) says the script writes. Without it Redis refuses only a first write that grows memory,
  and this script's first write (DEL or PEXPIRE of the record) is not one: once a script has
  written, Redis lets it finish, and an import went on writing past maxmemory.

  Returns one letter per line, in order: 'c' created, 'u' unchanged, 'x' conflict; or 'stale'.
  As in createPlant-3, the creation times are the partition's clock, strictly increasing, and a
  line's record is written after its plant and outbox entry.
]]
--- @include "partitionClock"
--- @include "plantEvent"

local chunk = tonumber(ARGV[1])
local recorded = tonumber(redis.call('HGET', KEYS[3], 'chunk') or '-1')
if recorded > chunk then return 'stale' end
if recorded < chunk then
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'chunk', ARGV[1])
end
redis.call('PEXPIRE', KEYS[3], ARGV[5])

local clock = clockNow()
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
local actor, requestId, at = ARGV[2], ARGV[3], ARGV[4]
local outcomes = {}
local createdAny = false
for k = 4, #KEYS do
  local a = 6 + (k - 4) * 5
  local line, id, name, hasTag, tag = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  local outcome
  if redis.call('HEXISTS', KEYS[3], line) == 1 then
    outcome = 'c'
  else
    local existing = redis.call('HMGET', KEYS[k], 'name', 'tag')
    if existing[1] then
      local sameTag = (hasTag == '1' and existing[2] == tag) or (hasTag == '0' and not existing[2])
      outcome = (existing[1] == name and sameTag) and 'u' or 'x'
    else
      last = clockAfter(clock, last)
      local created = formatClock(last)
      commitCreatedPlant(KEYS[k], KEYS[2], id, name, hasTag == '1' and tag or nil, created, actor, requestId, at)
      redis.call('HSET', KEYS[3], line, '1')
      createdAny = true
      outcome = 'c'
    end
  end
  outcomes[#outcomes + 1] = outcome
end
if createdAny then redis.call('SET', KEYS[1], formatClock(last)) end
return table.concat(outcomes)
