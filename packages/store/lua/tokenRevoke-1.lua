--[[
  Marks a token revoked; the first revocation time stays.

  KEYS[1] token record   tokens:{tokens}:<id>
  ARGV[1] now (ISO).

  Returns 0 when there is no such token, else 1.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], 'revokedAt', ARGV[1])
return 1
