--[[
  Creates a plant with its `plant.created` outbox entry, atomically (see includes/createPlant).

  KEYS[1] plant hash        plant:{p<n>}:<id>
  KEYS[2] partition clock   plants:{p<n>}:clock
  KEYS[3] partition outbox  plants:{p<n>}:outbox
  ARGV[1] plant id; ARGV[2] name; ARGV[3] '1' when a tag is given, else '0'; ARGV[4] tag;
  ARGV[5] actor; ARGV[6] request id; ARGV[7] ISO time.

  Returns {'created' | 'unchanged' | 'conflict', created µs, version µs}.
]]
--- @include "createPlant"
return createPlant(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
