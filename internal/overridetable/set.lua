-- set.lua: sets one override and bumps the version, atomically, so that
-- every service that saw the old version reloads; refuses a new field when
-- the hash holds max fields already (MaxEntries, table.go).
-- KEYS[1]  the overrides hash, <prefix>{overrides}
-- KEYS[2]  its version counter, <prefix>{overrides}:version (same slot)
-- ARGV     field, value, max
-- Reply    {1, the new version} when set; {0, the fields held} when refused,
--          nothing written. Redis 2.6 or later.
local field, value, max = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('HEXISTS', KEYS[1], field) == 0 then
	local n = redis.call('HLEN', KEYS[1])
	if n >= max then
		return {0, n}
	end
end
redis.call('HSET', KEYS[1], field, value)
return {1, redis.call('INCR', KEYS[2])}
