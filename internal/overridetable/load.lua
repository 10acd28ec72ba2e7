-- load.lua: reads the version and the whole hash, atomically, unless the
-- hash takes more than max bytes in Redis: then only its size, so that an
-- oversized hash (written by hand) is never sent to a reader.
-- KEYS[1]  the overrides hash, <prefix>{overrides}
-- KEYS[2]  its version counter, <prefix>{overrides}:version (same slot)
-- ARGV     max, in bytes (maxBytes, table.go)
-- Reply    {version or "", bytes, {field, value, ...}} under max;
--          {version or "", bytes} over it. MEMORY USAGE with SAMPLES 0
--          counts every field and value (O(fields)); a missing hash is 0
--          bytes. Where MEMORY is refused (an ACL without it, a managed
--          Redis that disables it), bytes is -1 and the hash is read
--          unmeasured, as before the bound: overrides keep working.
local version = redis.call('GET', KEYS[2]) or ''
local bytes = redis.pcall('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')
if type(bytes) == 'table' then
	bytes = -1
end
bytes = bytes or 0
if bytes > tonumber(ARGV[1]) then
	return {version, bytes}
end
return {version, bytes, redis.call('HGETALL', KEYS[1])}
