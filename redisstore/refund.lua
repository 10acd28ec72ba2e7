-- refund.lua: undo what takes recorded for some of their hits,
-- idempotently, crediting only what provably remains of the take, so
-- that a refund never lets a key admit more than its limit. The proof is
-- on floodgate.Store.Refund; this script follows it.
--
-- KEYS: two keys per hit, in the order of the hits (read once each, into
-- the locals of the same names below):
--   key   the state key <prefix>{<rule>:<key>}:<letter>:<window> (see
--         take.lua)
--   tomb  the tombstone key <prefix>{<rule>:<key>}:r:<letter>:<window>:<take>,
--         where take is the name of the hit's take (floodgate.Stamp.Take,
--         in base 36): a tiny string that marks the take's refund as done
-- ARGV: for each hit, 5 values (read once each, likewise):
--   alg     "s" sliding window (key letter w), "t" token bucket, "f" fixed
--           window, "c" sliding-window counter
--   cost    units the hit counted for
--   window  "t": the emission interval T in us; "s", "f", "c": the window W
--           in us
--   at      the server time of the take, in us (take.lua's reply)
--   epoch   the epoch of the state that recorded the hit (take.lua's
--           reply); a state with another epoch does not hold the take
-- Reply: an integer, the number of hits whose state the refund changed.
-- Sliding window: once per take (SET tomb NX), while the take's time is
-- in the window, remove the cost oldest entries at or after that time from
-- the ring and write back its live entries, in order (O(limit), on a rare
-- path), with the TTL a take gives: until the newest live entry leaves the
-- window, in ms rounded up, never less than 1 (not the key's PTTL, which is
-- 0 during its last millisecond while its entries may still weigh); or
-- delete the key when none is left.
-- Token bucket: once per take (SET tomb NX), move the TAT back by
-- max(0, cost * T - (now - at)), not before now. cost * T is taken at
-- most 2^52 us: no take moves a TAT further (an overdraw hit's cost may
-- be 2^51, take.lua's AHEAD bounds its move), as memstore bounds it.
-- Fixed window and sliding-window counter: only if at and now lie in the
-- same window, once per take, lower the current window's count by cost, not
-- below 0; otherwise credit nothing.
-- A tombstone lives as long as a later refund of the take could still credit
-- something: a sliding window's once the take leaves the window, a token
-- bucket's credit within cost * T - (now - at), and a window's once the
-- window ends. No credit, no tombstone.
-- TTLs, of states and tombstones alike, are computed from the time in us
-- until which they weigh, rounded up to ms, never read back with PTTL (see
-- take.lua's TTLs note).
-- Time: redis.call('TIME'), integer microseconds.
-- Requires Redis 5.0 or later (see take.lua).

-- The arguments, by the names above: hit i's are keys[i], tombs[i],
-- algs[i], costs[i], windows[i], ats[i] and epochs[i].
local keys, tombs, algs, costs, windows, ats, epochs = {}, {}, {}, {}, {}, {}, {}
local nhits = #KEYS / 2
if #KEYS % 2 ~= 0 or #ARGV ~= 5 * nhits then
  error('redisstore: refund: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments: want 2 and 5 per hit')
end
for i = 1, nhits do
  local a = 5 * (i - 1)
  keys[i], tombs[i] = KEYS[2 * i - 1], KEYS[2 * i]
  algs[i], costs[i], windows[i], ats[i], epochs[i] = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), ARGV[a + 5]
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

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

local function fmt(x)
  return string.format('%.0f', x)
end

-- The sliding window's ring (take.lua): entries of 6 bytes, then a
-- header of 34 (epoch 6, head 3, count 3, first 3, base 7, tfirst 6,
-- newest 6), fixed-width little-endian integers in plain Lua. Entries,
-- tfirst and newest are offsets from base.
local W, HDR = 6, 34

local function enc(x, n)
  local b = {}
  for i = 1, n do
    local r = x % 256
    b[i] = r
    x = (x - r) / 256
  end
  return string.char(unpack(b))
end

-- dec returns the n-byte integer at s[i].
local function dec(s, i, n)
  local v = 0
  for j = i + n - 1, i, -1 do
    v = v * 256 + string.byte(s, j)
  end
  return v
end

local changed = 0
for i = 1, nhits do
  local key, tomb, alg, cost, window, at, epoch = keys[i], tombs[i], algs[i], costs[i], windows[i], ats[i], epochs[i]
  local age = math.max(0, now - at)
  if alg == 's' then
    -- Remove the cost oldest entries at or after the take's time from
    -- the ring, if the take still weighs (its time is in the window) on
    -- the state it was recorded in, once. They are the take's own, or
    -- entries of its instant (alike, whichever take recorded them), or
    -- entries older than its own where the server's clock had stepped
    -- back behind the ring's newest entry, which take.lua then records
    -- the take at: never more than the take holds (memstore's
    -- entry.remove). The ring is written back with its live entries
    -- only, in order.
    local stored = redis.call('GET', key)
    local h = stored and #stored - HDR + 1
    if stored and #stored >= HDR and dec(stored, h, 6) == tonumber(epoch) and at > now - window and
        redis.call('SET', tomb, '1', 'NX', 'PX', fmt(ceildiv(at + window - now, 1000))) then
      local head, count = dec(stored, h + 6, 3), dec(stored, h + 9, 3)
      if count == 0 or head >= count or #stored ~= W * count + HDR then
        error('redisstore: sliding window ' .. key .. ': malformed state')
      end
      -- Every entry kept fits the base it was written with: the base
      -- stays.
      local base = dec(stored, h + 15, 7)
      local kept, removed = {}, 0
      for i = 0, count - 1 do -- oldest first
        local v = base + dec(stored, W * ((head + i) % count) + 1, W)
        if removed < cost and v >= at then
          removed = removed + 1
        elseif v > now - window then
          kept[#kept + 1] = v
        end
      end
      if removed > 0 then
        if #kept == 0 then
          redis.call('DEL', key) -- nothing else in the window
        else
          local parts = {}
          for i = 1, #kept do
            parts[#parts + 1] = enc(kept[i] - base, W)
          end
          -- epoch, head 0, count, first 0, base, tfirst, newest
          parts[#parts + 1] = string.sub(stored, h, h + 5) .. enc(0, 3) .. enc(#kept, 3) .. enc(0, 3) ..
            string.sub(stored, h + 15, h + 21) .. enc(kept[1] - base, W) .. enc(kept[#kept] - base, W)
          -- The ring lives until its newest time leaves the window, as
          -- take.lua's TTL: never PTTL, which is 0 during the key's last
          -- millisecond while its times are still in the window.
          redis.call('SET', key, table.concat(parts), 'PX', fmt(ceildiv(kept[#kept] + window - now, 1000)))
        end
        changed = changed + 1
      end
    end
  elseif alg == 't' then
    local credit = math.min(cost * window, 2 ^ 52) - age
    local stored = redis.call('GET', key)
    local tat, ep = nil, nil
    if stored then
      tat, ep = string.match(stored, '^(%d+):(%d+)$')
      tat = tonumber(tat)
    end
    if credit > 0 and ep == epoch and tat ~= nil and tat > now and
        redis.call('SET', tomb, '1', 'NX', 'PX', fmt(ceildiv(credit, 1000))) then
      tat = math.max(now, tat - credit)
      if tat > now then
        redis.call('SET', key, fmt(tat) .. ':' .. ep, 'PX', fmt(ceildiv(tat - now, 1000)))
      else
        redis.call('DEL', key)
      end
      changed = changed + 1
    end
  elseif alg == 'f' or alg == 'c' then
    local idx = floordiv(now, window)
    local left = (idx + 1) * window - now -- until the window's end
    local stored = redis.call('GET', key)
    -- A take stamped after now (a clock that stepped back) may lie in a
    -- later window than now's: no credit.
    if at <= now and floordiv(at, window) == idx and stored then
      if alg == 'f' then
        local si, sc, ep = string.match(stored, '^(%d+):(%d+):(%d+)$')
        if ep == epoch and tonumber(si) == idx and tonumber(sc) > 0 and
            redis.call('SET', tomb, '1', 'NX', 'PX', fmt(ceildiv(left, 1000))) then
          local count = math.max(0, tonumber(sc) - cost)
          if count > 0 then
            redis.call('SET', key, si .. ':' .. fmt(count) .. ':' .. ep, 'PX', fmt(ceildiv(left, 1000)))
          else
            redis.call('DEL', key)
          end
          changed = changed + 1
        end
      else
        local si, sp, sc, ep = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
        if ep == epoch and tonumber(si) == idx and tonumber(sc) > 0 and
            redis.call('SET', tomb, '1', 'NX', 'PX', fmt(ceildiv(left, 1000))) then
          local cur = math.max(0, tonumber(sc) - cost)
          if cur > 0 or tonumber(sp) > 0 then
            -- Until the next window ends, as take.lua sets it.
            redis.call('SET', key, si .. ':' .. sp .. ':' .. fmt(cur) .. ':' .. ep, 'PX', fmt(ceildiv(left + window, 1000)))
          else
            redis.call('DEL', key) -- nothing left: as if never seen
          end
          changed = changed + 1
        end
      end
    end
  else
    error('redisstore: unknown algorithm ' .. tostring(alg))
  end
end
return changed
