--[[
  Issues a token record. Refuses (0) an id already taken and (-1) a hash already known, so
  nothing is ever overwritten (the caller draws a new id and token).

  KEYS[1] token record   tokens:{tokens}:<id>
  KEYS[2] by-hash index  tokens:{tokens}:by-hash
  KEYS[3] id listing     tokens:{tokens}:ids
  ARGV[1] id; ARGV[2] SHA-256 of the token (hex); ARGV[3] creation time (ms);
  ARGV[4...] the record's field/value pairs.
]]
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return 1
