--[[
  admitRequest(peekKey, hitKey, peekLimit, windowMs): counts one event on the counter `hitKey` only
  while the counter `peekKey` is under `peekLimit` — a request's address check and its token's
  count. The first event of a window starts its expiry.

  Returns {1 = counted | 0 = refused, count, ms left in the window} of the counter it stopped at.

  Not written to the AOF nor sent to replicas (redis.set_repl): a counter is worth nothing after its
  minute, and with `appendfsync always` a write makes Redis fsync before it answers, so every
  admitted request would wait for the disk for it. A restart or a failover starts the affected
  windows afresh. Replication is switched back on before returning, for whatever the caller writes.
]]
local function admitRequest(peekKey, hitKey, peekLimit, windowMs)
  redis.set_repl(redis.REPL_NONE)
  local result
  local peeked = tonumber(redis.call('GET', peekKey) or '0')
  if peeked >= tonumber(peekLimit) then
    result = {0, peeked, redis.call('PTTL', peekKey)}
  else
    local count = redis.call('INCR', hitKey)
    if count == 1 then redis.call('PEXPIRE', hitKey, windowMs) end
    result = {1, count, redis.call('PTTL', hitKey)}
  end
  redis.set_repl(redis.REPL_ALL)
  return result
end
