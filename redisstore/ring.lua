-- ring.lua: the prelude of take.lua, refund.lua and renew.lua. Redis
-- scripts cannot include one another, so the store sends each script as
-- this file followed by the script's own (script.go, assembled once at
-- start): the server's time, exact integer arithmetic, TTLs, and the
-- codec of the sliding window's ring. It reads no KEYS or ARGV and writes
-- nothing.
-- Time: redis.call('TIME'), integer microseconds; never a client's clock.
-- Requires Redis 5.0 or later (effects replication of scripts that read
-- TIME before writing).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- Integer arithmetic on doubles: every value stays below 2^53, where
-- doubles are exact; divisions are corrected so that rounding never moves
-- a quotient across an integer.
local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceildiv(a, b)
  return -floordiv(-a, b)
end

-- fmt formats an integer exactly. Every number passed to redis.call goes
-- through it: tostring uses %.14g, and Redis 7.2+ may format a bare Lua
-- number such as 1e10 in exponent notation, which commands reject.
local function fmt(x)
  return string.format('%.0f', x)
end

-- ttl returns the TTL of a state that weighs until the time e in us,
-- formatted: ceil((e - now) / 1000) ms, at least 1 since e > now. Redis
-- keeps the expiry in ms from the ms of the write and keeps the key
-- through its last ms, so the key outlives every us before e. A TTL is
-- always computed from e, never read back with PTTL: Redis reports PTTL 0
-- during a key's whole last ms, while its state may still weigh (issue
-- 25). The quotient is exact: e - now stays below 2^43 ms. ttl keeps its
-- last answer, as the next state usually shares e.
local ttl
do
  local lastE, lastTTL
  ttl = function(e)
    if e ~= lastE then
      lastE, lastTTL = e, fmt(math.ceil((e - now) / 1000))
    end
    return lastTTL
  end
end

-- The ring: a sliding window's log (key letter w, and h for leases) is
-- the string "<entries><header>":
--   entries  count slots of W = 6 bytes, each a time as its offset in us
--            from base, in admission order from the slot head (the
--            oldest), wrapping once count is the limit (until then head
--            is 0)
--   header   HDR = 34 bytes: epoch (6), head (3), count (3), first (3),
--            base (7), tfirst (6), newest (6)
-- all little-endian. first is the index (0 the oldest) of the oldest entry
-- that was in the window at the last write: those before it have left for
-- good. tfirst is that entry's time (the newest's when first is count),
-- newest the newest entry's, both as offsets from base, like the entries.
-- base is at or before every entry's time, and offsets stay below 2^48 us
-- (8.9 years): a write whose time would not fit rebases the ring.
-- Times never decrease along the ring.
local W, HDR = 6, 34

-- The codec: Redis's struct library where there is one (a C call per
-- header or entry), plain Lua elsewhere (miniredis, which the demo embeds,
-- has none; TestRingEncodersAgree runs both on Redis and compares their
-- bytes). enc6 and dec6 encode and decode an entry's offset; packHeader
-- and headerFields a header, whose tfirst and newest they take and give as
-- times; packTail n entries at the time t, then a header (what an append
-- writes), in one string.
local enc6, dec6, packHeader, headerFields, packTail
local struct = rawget(_G, 'struct')
if struct then
  local pack, unpack = struct.pack, struct.unpack
  enc6 = function(x)
    return pack('<I6', x)
  end
  dec6 = function(s, i)
    return (unpack('<I6', s, i))
  end
  packHeader = function(ep, head, count, first, base, tfirst, newest)
    return pack('<I6I3I3I3I7I6I6', ep, head, count, first, base, tfirst - base, newest - base)
  end
  packTail = function(n, t, ep, head, count, first, base, tfirst, newest)
    if n == 1 then
      -- One pack: no entry string to repeat and join (callgrind, BENCHMARKS.md).
      return pack('<I6I6I3I3I3I7I6I6', t - base, ep, head, count, first, base, tfirst - base, newest - base)
    end
    return string.rep(pack('<I6', t - base), n) .. packHeader(ep, head, count, first, base, tfirst, newest)
  end
  headerFields = function(s, i)
    local ep, head, count, first, base, tfirst, newest = unpack('<I6I3I3I3I7I6I6', s, i)
    return ep, head, count, first, base, base + tfirst, base + newest
  end
else
  local function enc(x, n)
    local b = {}
    for j = 1, n do
      local r = x % 256
      b[j] = r
      x = (x - r) / 256
    end
    return string.char(unpack(b))
  end
  local function dec(s, i, n)
    local v = 0
    for j = i + n - 1, i, -1 do
      v = v * 256 + string.byte(s, j)
    end
    return v
  end
  enc6 = function(x)
    return enc(x, 6)
  end
  dec6 = function(s, i)
    return dec(s, i, 6)
  end
  packHeader = function(ep, head, count, first, base, tfirst, newest)
    return enc(ep, 6) .. enc(head, 3) .. enc(count, 3) .. enc(first, 3) .. enc(base, 7) ..
      enc(tfirst - base, 6) .. enc(newest - base, 6)
  end
  packTail = function(n, t, ep, head, count, first, base, tfirst, newest)
    return string.rep(enc(t - base, 6), n) .. packHeader(ep, head, count, first, base, tfirst, newest)
  end
  headerFields = function(s, i)
    local base = dec(s, i + 15, 7)
    return dec(s, i, 6), dec(s, i + 6, 3), dec(s, i + 9, 3), dec(s, i + 12, 3), base,
      base + dec(s, i + 22, 6), base + dec(s, i + 28, 6)
  end
end

local function malformed(what, key)
  error('redisstore: ' .. what .. ' ' .. key .. ': malformed state')
end

-- ringTimes decodes the whole ring stored (refund.lua and renew.lua read
-- it with GET): its epoch, base and times, oldest first.
local function ringTimes(what, key, stored)
  local h = #stored - HDR + 1
  if h < 1 then
    malformed(what, key)
  end
  local ep, head, count, _, base = headerFields(stored, h)
  if count == 0 or head >= count or #stored ~= W * count + HDR then
    malformed(what, key)
  end
  local times = {}
  for i = 0, count - 1 do
    times[i + 1] = base + dec6(stored, W * ((head + i) % count) + 1)
  end
  return ep, base, times
end

-- ringWrite writes a ring of the epoch ep whole from times (oldest first,
-- each in the window, each within 2^48 us of base): head 0, first 0, with
-- the TTL a take gives, until the newest time leaves the window.
local function ringWrite(key, ep, base, times, window)
  local parts = {}
  for i = 1, #times do
    parts[i] = enc6(times[i] - base)
  end
  local newest = times[#times]
  parts[#parts + 1] = packHeader(ep, 0, #times, 0, base, times[1], newest)
  redis.call('SET', key, table.concat(parts), 'PX', ttl(newest + window))
end
