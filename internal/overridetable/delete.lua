-- delete.lua: deletes one override, if present (and, given a value, only
-- while the field still holds that value), and then bumps the version.
-- KEYS[1]  the overrides hash, <prefix>{overrides}
-- KEYS[2]  its version counter, <prefix>{overrides}:version (same slot)
-- ARGV     field[, value]
-- Reply    1 if deleted, 0 if not (integer). Redis 2.6 or later.
local field, value = ARGV[1], ARGV[2]
if value and redis.call('HGET', KEYS[1], field) ~= value then
	return 0
end
local n = redis.call('HDEL', KEYS[1], field)
if n > 0 then
	redis.call('INCR', KEYS[2])
end
return n
