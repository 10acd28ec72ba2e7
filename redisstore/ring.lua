-- ring.lua: the prelude of take.lua, refund.lua and renew.lua (Redis
-- scripts cannot include one another: script.go sends each as this file
-- and its own). It reads no KEYS or ARGV and writes nothing, and holds
-- only what every script or take.lua's fast path needs: each function
-- built costs every call about 1.5k Redis instructions (BENCHMARKS.md).
-- Time: redis.call('TIME'), integer microseconds; never a client's clock.
-- Requires Redis 5.0 or later (effects replication of scripts that read
-- TIME before writing).

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- Integer arithmetic on doubles, exact below 2^53: a quotient is
-- corrected so that rounding never moves it across an integer.
local function floordiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- fmt formats an integer exactly, for every number sent to redis.call
-- (Redis 7.2+ may format a bare Lua number such as 1e10 with an exponent).
local function fmt(x)
  return string.format('%.0f', x)
end

-- ttl is the TTL of a state that weighs until e (us): ceil((e - now) /
-- 1000) ms, exact (e - now < 2^43 ms), so the key outlives every us before
-- e; PTTL, 0 in a key's last ms, is never read back. It keeps its last one.
local lastE, lastTTL
local function ttl(e)
  if e ~= lastE then
    lastE, lastTTL = e, fmt(math.ceil((e - now) / 1000))
  end
  return lastTTL
end

-- The ring, a sliding window's log (key letters w, and h for leases):
-- "<entries><header>", little-endian. Entries: count slots of W bytes,
-- each a time as its offset in us from base, in admission order from
-- slot head (the oldest), wrapping once count is the limit (head is 0
-- until then). Header (HDR bytes, HEADER): epoch, head, count, first (the
-- index, 0 the oldest, of the oldest entry in the window at the last
-- write), base, tfirst and newest (that entry's and the newest's offsets).
-- Offsets stay below 2^48 us (8.9 years); times never decrease.
-- The codec is Redis's struct library (pack; unpack from the byte i), or
-- where there is none (miniredis, the demo's) plain-Lua stand-ins for
-- these formats alone; TestRingEncodersAgree compares their bytes.
local W, HDR, HEADER = 6, 34, '<I6I3I3I3I7I6I6'
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
