-- ring.lua: the prelude of take.lua, refund.lua and renew.lua. Redis
-- scripts cannot include one another, so the store sends each script as
-- this file followed by the script's own (script.go, assembled once at
-- start): the server's time, exact integer arithmetic, TTLs, and the
-- codec of the sliding window's ring. It reads no KEYS or ARGV and writes
-- nothing. (Every function it builds costs every call, about 1.5k Redis
-- instructions: callgrind, BENCHMARKS.md; so it holds only what take.lua's
-- fast path or every script needs.)
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

-- The codec: pack and unpack, Redis's struct library (a C call per
-- header or entry), for unsigned little-endian integers of n bytes ('<I6'
-- an entry's offset, HEADER a header). Where Redis has no struct library
-- (miniredis, which the demo embeds), plain-Lua stand-ins for those
-- formats alone; TestRingEncodersAgree runs both on Redis and compares
-- their bytes. Both unpack at the byte i.
local HEADER = '<I6I3I3I3I7I6I6' -- epoch, head, count, first, base, tfirst, newest
local tunpack, pack, unpack = unpack, nil, nil -- Lua's unpack of a table
local struct = rawget(_G, 'struct')
if struct then
  pack, unpack = struct.pack, struct.unpack
else
  pack = function(f, ...)
    local out, vals, k = {}, {...}, 0
    for n in string.gmatch(f, '%d') do
      k = k + 1
      local x = vals[k]
      for _ = 1, tonumber(n) do
        local r = x % 256
        out[#out + 1] = string.char(r)
        x = (x - r) / 256
      end
    end
    return table.concat(out)
  end
  unpack = function(f, s, i)
    local vals = {}
    for n in string.gmatch(f, '%d') do
      local v = 0
      for j = i + tonumber(n) - 1, i, -1 do
        v = v * 256 + string.byte(s, j)
      end
      vals[#vals + 1], i = v, i + tonumber(n)
    end
    return tunpack(vals)
  end
end
