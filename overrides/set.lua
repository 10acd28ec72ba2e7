-- set.lua: sets one override and bumps the version, atomically, so that
-- every Source that saw the old version reloads.
-- KEYS[1]  the overrides hash, <prefix>{overrides}
-- KEYS[2]  its version counter, <prefix>{overrides}:version (same slot)
-- ARGV     field, value
-- Reply    the new version (integer). Redis 2.6 or later.
local field, value = ARGV[1], ARGV[2]
redis.call('HSET', KEYS[1], field, value)
return redis.call('INCR', KEYS[2])
