-- renew.lua: renew leases (floodgate.Concurrency hits): move each lease's
-- entries in its key's ring to now, atomically, if they still hold their
-- slots. The contract, and why the entries found are the lease's own, are
-- on floodgate.Store.Renew; this script follows it.
--
-- KEYS: two keys per lease, in order (read once each, into the locals of
-- the same names below):
--   key   the state key <prefix>{<rule>:<key>}:h:<window> (a ring, see
--         take.lua)
--   tomb  the tombstone key of the take's refund (refund.lua): a lease
--         refunded (released) is never renewed
-- ARGV: for each lease, 4 values (read once each, likewise):
--   cost    entries the lease holds
--   window  the lease's time to live W in us
--   at      the lease's time in us: the take's, or its last renewal's
--   epoch   the epoch of the state that recorded the take
-- Reply: a flat array of integers, one per lease: its new time in us, or
-- 0 when it no longer holds its slots (another state, its time out of the
-- window, refunded, or no entry at or after its time), when nothing is
-- written for it.
-- A lease that holds: its cost oldest entries at or after at are removed
-- and as many written at t = max(now, the newest entry kept), as take.lua
-- records a take (the ring stays in order); the ring is written back with
-- its live entries only, in order, rebased on the oldest, with the TTL a
-- take gives: until its newest entry leaves the window, in ms rounded up.
-- The count of live entries is unchanged.
-- Time: redis.call('TIME'), integer microseconds.
-- Requires Redis 5.0 or later (see take.lua).

local keys, tombs, costs, windows, ats, epochs = {}, {}, {}, {}, {}, {}
local n = #KEYS / 2
if #KEYS % 2 ~= 0 or #ARGV ~= 4 * n then
  error('redisstore: renew: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments: want 2 and 4 per lease')
end
for i = 1, n do
  local a = 4 * (i - 1)
  keys[i], tombs[i] = KEYS[2 * i - 1], KEYS[2 * i]
  costs[i], windows[i], ats[i], epochs[i] = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4])
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local function ceildiv(a, b)
  local q = math.floor(a / b)
  if q * b < a then
    q = q + 1
  elseif (q - 1) * b >= a then
    q = q - 1
  end
  return q
end

local function fmt(x)
  return string.format('%.0f', x)
end

-- The ring (take.lua): entries of 6 bytes, then a header of 34 (epoch 6,
-- head 3, count 3, first 3, base 7, tfirst 6, newest 6), fixed-width
-- little-endian integers in plain Lua, as refund.lua reads and writes it.
local W, HDR = 6, 34

local function enc(x, nb)
  local b = {}
  for i = 1, nb do
    local r = x % 256
    b[i] = r
    x = (x - r) / 256
  end
  return string.char(unpack(b))
end

local function dec(s, i, nb)
  local v = 0
  for j = i + nb - 1, i, -1 do
    v = v * 256 + string.byte(s, j)
  end
  return v
end

local out = {}
for i = 1, n do
  local key, tomb, cost, window, at, epoch = keys[i], tombs[i], costs[i], windows[i], ats[i], epochs[i]
  out[i] = 0
  local stored = redis.call('GET', key)
  local h = stored and #stored - HDR + 1
  if stored and #stored >= HDR and dec(stored, h, 6) == epoch and at > now - window and
      redis.call('EXISTS', tomb) == 0 then
    local head, count = dec(stored, h + 6, 3), dec(stored, h + 9, 3)
    if count == 0 or head >= count or #stored ~= W * count + HDR then
      error('redisstore: lease ' .. key .. ': malformed state')
    end
    local base = dec(stored, h + 15, 7)
    local kept, moved = {}, 0
    for j = 0, count - 1 do -- oldest first
      local v = base + dec(stored, W * ((head + j) % count) + 1, W)
      if moved < cost and v >= at then
        moved = moved + 1
      elseif v > now - window then
        kept[#kept + 1] = v
      end
    end
    if moved > 0 then
      local t = now
      if #kept > 0 then
        t = math.max(now, kept[#kept])
      end
      for _ = 1, moved do
        kept[#kept + 1] = t
      end
      base = kept[1] -- offsets from the oldest entry: each below the window
      if t - base >= 2 ^ 48 then
        error('redisstore: lease ' .. key .. ': an entry older than 2^48 us (a window longer than 8.9 years)')
      end
      local parts = {}
      for j = 1, #kept do
        parts[j] = enc(kept[j] - base, W)
      end
      -- epoch, head 0, count, first 0, base, tfirst, newest
      parts[#parts + 1] = string.sub(stored, h, h + 5) .. enc(0, 3) .. enc(#kept, 3) .. enc(0, 3) ..
        enc(base, 7) .. enc(0, W) .. enc(t - base, W)
      redis.call('SET', key, table.concat(parts), 'PX', fmt(ceildiv(t + window - now, 1000)))
      out[i] = t
    end
  end
end
return out
