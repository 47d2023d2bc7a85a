--[[
  Checks a presented token against its record and notes its use (at most once per granularity).
  The caller has looked its id up in the by-hash index (HGET) to name the record key; the index is
  read again here, so a token revoked or replaced in between is not accepted on a stale lookup.

  KEYS[1] by-hash index  tokens:{tokens}:by-hash
  KEYS[2] token record   tokens:{tokens}:<id>
  ARGV[1] SHA-256 of the token (hex); ARGV[2] the id the lookup found; ARGV[3] now (ms);
  ARGV[4] now (ISO); ARGV[5] last-used granularity (ms).

  Returns {'invalid'} | {'revoked'} | {'expired'} | {'ok', field, value, ...}.
]]

-- Milliseconds since the epoch of a 'YYYY-MM-DDTHH:MM:SS.sssZ' string (Date#toISOString), or nil.
local function iso_ms(text)
  if not text then return nil end
  local y, mo, d, h, mi, s, ms = string.match(text, '^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)%.(%d%d%d)Z$')
  if not y then return nil end
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + d - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000 + tonumber(s) * 1000 + tonumber(ms)
end

if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return {'invalid'} end
local flat = redis.call('HGETALL', KEYS[2])
if #flat == 0 then return {'invalid'} end
local record = {}
for i = 1, #flat, 2 do record[flat[i]] = flat[i + 1] end
if record['hash'] ~= ARGV[1] then return {'invalid'} end
if record['revokedAt'] then return {'revoked'} end
local now = tonumber(ARGV[3])
if record['expiresAt'] then
  local expires = iso_ms(record['expiresAt'])
  -- An unreadable expiry fails closed.
  if not expires or expires <= now then return {'expired'} end
end
local used = iso_ms(record['lastUsedAt'])
if not used or now - used >= tonumber(ARGV[5]) then
  redis.call('HSET', KEYS[2], 'lastUsedAt', ARGV[4])
  flat = redis.call('HGETALL', KEYS[2])
end
return {'ok', unpack(flat)}
