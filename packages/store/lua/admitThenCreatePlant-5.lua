--[[
  A REST create on one node: the request's rate-limit admission (includes/admitRequest) and, when
  admitted, the create (includes/createPlant) in one script — one round trip per create instead of
  two. Only on one node: on a cluster the counters and the plant's partition live in other slots.

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition clock   plants:{p<n>}:clock
  KEYS[3] partition outbox  plants:{p<n>}:outbox
  KEYS[4] counter peeked    ratelimit:auth-failures:<address>
  KEYS[5] counter hit       ratelimit:token:<token id>
  ARGV[1..7] as createPlant-3; ARGV[8] limit of the peeked counter; ARGV[9] window of the hit
  counter (ms); ARGV[10] limit of the hit counter.

  Returns {admitted 1 | 0, count, ms left} of the counter it stopped at, followed, when the
  request was admitted and its token's count is within its limit, by createPlant-3's reply.
]]
--- @include "admitRequest"
--- @include "createPlant"
local admission = admitRequest(KEYS[4], KEYS[5], ARGV[8], ARGV[9])
if admission[1] == 0 or admission[2] > tonumber(ARGV[10]) then return admission end
local created = createPlant(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
return {admission[1], admission[2], admission[3], created[1], created[2], created[3]}
