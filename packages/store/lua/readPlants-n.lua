--[[
  The name and tag of a list page's plants in one command, each only if it is still the version
  the index entry was made for. Only on one node — on a cluster a page's plants live in
  different slots.

  KEYS[1..n] plant   plant:{p<n>}:<id>   (n: the call's first argument)
  ARGV[1]    the creation time (µs) each plant must have — its index entry's version — in key
             order, separated by spaces (one argument, not n: the client's cost is per argument)

  Returns one JSON string (one reply element, not three per plant: the client's cost is per
  element): [name, tag or false, …] in key order, name false where the plant is gone or is
  another version (deleted, or deleted and created again, before the worker caught up).
]]
local out = {}
local i = 0
for version in string.gmatch(ARGV[1], '%S+') do
  i = i + 1
  local plant = redis.call('HMGET', KEYS[i], 'name', 'tag', 'created')
  if plant[1] and plant[3] == version then
    out[#out + 1] = plant[1]
    out[#out + 1] = plant[2]
  else
    out[#out + 1] = false
    out[#out + 1] = false
  end
end
return cjson.encode(out)
