--[[
  Counts one event on a counter only while another is under a limit: the address check and the
  token's count of a request in one command (see includes/admitRequest). Only on one node — on a
  cluster the two counters may live on different shards (rateLimitPeek-1 and rateLimitHit-1 there,
  sent together). A create on one node takes this step inside its own script (admitThenCreatePlant-5).

  KEYS[1] counter peeked   ratelimit:<name>
  KEYS[2] counter hit      ratelimit:<name>
  ARGV[1] limit of the peeked counter
  ARGV[2] window of the hit counter (ms)

  Returns {1 = counted | 0 = refused, count, ms left in the window} of the counter it stopped at.
]]
--- @include "admitRequest"
return admitRequest(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
