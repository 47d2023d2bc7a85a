-- Whether an If-Match list (space-separated versions; '' or '*': any) names the plant's `version`.
local function ifMatchHolds(expected, version)
  if not expected or expected == '' or expected == '*' then return true end
  for each in string.gmatch(expected, '%S+') do
    if each == version then return true end
  end
  return false
end
