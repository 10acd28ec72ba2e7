-- take.lua: check groups of rate-limit hits and record each group that is
-- entirely within its limits. One call carries one or more independent
-- groups (one group per floodgate Take); a group is all-or-nothing, and a
-- later group sees what an earlier group of the same call recorded.
--
-- KEYS: one state key per hit, in the order of the hits over all groups,
-- <prefix>{<rule>:<key>}:<alg>:<window> (see the package documentation):
--   s  sliding window  string, a ring of the admitted requests' times in
--                      us (see recordSliding)
--   t  token bucket    string "<TAT>:<epoch>", the theoretical arrival time
--                      in us
--   f  fixed window    string "<window index>:<count>:<epoch>"
--   c  sliding-window  string "<window index>:<previous count>:<current
--      counter         count>:<epoch>"
-- The epoch names the state: the take that creates a state (the key is
-- absent) writes its group's epoch, and later takes keep it. A refund
-- credits only a state whose epoch is its take's (refund.lua).
-- ARGV[1]  mode: "1" records the groups that are allowed (Take), "0"
--          records nothing and writes nothing (Peek)
-- ARGV[2]  number of groups G
-- then for each group:
--   id      the take's identifier (unused by the script: refunds name
--           takes by their stamp)
--   epoch   the epoch of a state this group creates: a positive integer
--           below 2^52
--   n       number of hits of the group
--   then for each hit, 4 values:
--     alg     "s" sliding window, "t" token bucket, "f" fixed window, "c"
--             sliding-window counter
--     cost    units this hit counts for (1..capacity)
--     limit   "s", "f", "c": the limit L; "t": the capacity B
--     window  "s", "f", "c": the window W in us; "t": the emission interval
--             T in us, ceil(W / L)
-- Reply: a flat array of integers: the server time in us, then 5 per hit,
-- in KEYS order: allowed (1 or 0), remaining, reset_after (us),
-- retry_after (us; 0 when allowed), and the epoch of the state that
-- recorded the hit (0 when nothing was recorded). A hit of a denied group may report allowed 1: it was within its
-- own limit, but nothing of its group was recorded.
-- Time: redis.call('TIME'), integer microseconds; never a client's clock.
-- Requires Redis 5.0 or later (effects replication of scripts that read TIME
-- before writing).

local record = ARGV[1] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

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

-- The TTL of the last window seen (one rule's window, usually), formatted
-- once per call.
local ttlWindow, ttlStr
local function ttl(window)
  if window ~= ttlWindow then
    ttlWindow, ttlStr = window, fmt(ceildiv(window, 1000))
  end
  return ttlStr
end

-- Each check returns allowed, remaining, reset_after, retry_after, when
-- allowed the value that record needs (nil for a sliding window), and the
-- epoch of the state it found (nil if none). Checks write nothing.

-- The sliding-window log is a ring of the admitted requests' times (see
-- the package documentation): the string "<header><entries>", the header
-- 12 bytes (epoch, 6; head, 3; count, 3; little-endian), then count
-- entries of 8 bytes, each a time in µs, in admission order from the
-- entry at index head (the oldest), wrapping once count is the limit
-- (until then head is 0, and the string may have room for more). A key never needs more than
-- its last limit admitted times: a request of cost n is admitted exactly
-- when the n-th oldest of them has left the window (a ring not yet full
-- counts its empty slots as long gone), and admitting it overwrites the n
-- oldest. Times never decrease along the ring, so the entries still in
-- the window are the newest ones, found by binary search.
local RHDR = 12

-- Fixed-width little-endian integers (0 to 2^53), in plain Lua: some
-- servers that speak Redis (miniredis, which the demo embeds) have no
-- struct library.
local function enc(x, n)
  local b = {}
  for i = 1, n do
    local r = x % 256
    b[i] = r
    x = (x - r) / 256
  end
  return string.char(unpack(b))
end

local function dec8(s, i)
  local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(s, i, i + 7)
  return ((((((b8 * 256 + b7) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 256 + b1
end

-- dec returns the n-byte integer at s[i].
local function dec(s, i, n)
  local v = 0
  for j = i + n - 1, i, -1 do
    v = v * 256 + string.byte(s, j)
  end
  return v
end

local function header(epoch, head, count)
  return enc(epoch, 6) .. enc(head, 3) .. enc(count, 3)
end

-- ringHeader returns a ring's epoch, head and count, or nil if key holds
-- none.
local function ringHeader(key)
  local h = redis.call('GETRANGE', key, 0, RHDR - 1)
  if h == '' then
    return nil
  end
  if #h ~= RHDR then
    error('redisstore: sliding window ' .. key .. ': malformed state')
  end
  return dec(h, 1, 6), dec(h, 7, 3), dec(h, 10, 3)
end

-- ringAt returns the time of the entry i (0 the oldest) of a ring.
local function ringAt(key, head, count, i)
  local off = RHDR + 8 * ((head + i) % count)
  local v = redis.call('GETRANGE', key, off, off + 7)
  if #v ~= 8 then
    error('redisstore: sliding window ' .. key .. ': malformed state')
  end
  return dec8(v, 1)
end

-- ringLive returns how many entries of a ring lie in (now - window, now]:
-- they are its newest.
local function ringLive(key, head, count, window)
  local cut = now - window
  if count == 0 or ringAt(key, head, count, count - 1) <= cut then
    return 0
  end
  if ringAt(key, head, count, 0) > cut then
    return count
  end
  local lo, hi = 0, count - 1 -- ringAt(lo) <= cut < ringAt(hi)
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    if ringAt(key, head, count, mid) > cut then
      hi = mid
    else
      lo = mid
    end
  end
  return count - hi
end

local function sliding(key, cost, limit, window)
  local ep, head, count = ringHeader(key)
  if ep == nil then
    return true, limit - cost, window, 0, nil, nil
  end
  local live = ringLive(key, head, count, window)
  if live + cost <= limit then
    return true, limit - live - cost, window, 0, nil, fmt(ep)
  end
  -- The entry whose leaving frees room for cost (it is live: see ringLive),
  -- whatever the ring's count against the limit.
  local frees = ringAt(key, head, count, count + cost - limit - 1)
  return false, math.max(0, limit - live), ringAt(key, head, count, count - 1) + window - now,
    frees + window - now, nil, fmt(ep)
end

-- ringEntries returns the entries of a ring, oldest first.
local function ringEntries(key, head, count)
  local s = redis.call('GET', key)
  local out = {}
  for i = 0, count - 1 do
    local off = RHDR + 8 * ((head + i) % count)
    out[i + 1] = dec8(s, off + 1)
  end
  return out
end

-- ringWrite writes the times in ts (oldest first) as a whole ring, head 0.
local function ringWrite(key, epoch, ts, window)
  local parts = {header(epoch, 0, #ts)}
  for i = 1, #ts do
    parts[i + 1] = enc(ts[i], 8)
  end
  redis.call('SET', key, table.concat(parts), 'PX', ttl(window))
end

-- recordSliding records cost requests at now in the ring of key (which
-- check allowed), and returns the ring's epoch.
local function recordSliding(key, cost, limit, window, epoch)
  local ep, head, count = ringHeader(key)
  if ep == nil then
    redis.call('SET', key, header(tonumber(epoch), 0, cost) .. string.rep(enc(now, 8), cost), 'PX', ttl(window))
    return epoch
  end
  local t = math.max(now, ringAt(key, head, count, count - 1)) -- a clock that stepped back keeps the order
  if count > limit or (head ~= 0 and count < limit) then
    -- The limit changed: keep the newest entries that matter, in order.
    local ts = ringEntries(key, head, count)
    local keep = {}
    for i = math.max(1, count - limit + 1), count do
      keep[#keep + 1] = ts[i]
    end
    ringWrite(key, ep, keep, window)
    head, count = 0, #keep
  end
  local entry = enc(t, 8)
  if head == 0 and count < limit then
    -- Not full: append, up to the limit. The string has room for
    -- (len - 16) / 8 times; it doubles when it must grow, up to the limit,
    -- written whole so that Redis allocates it exactly (SETRANGE past the
    -- end would let Redis double the allocation beyond the limit's room).
    local fill = math.min(cost, limit - count)
    local room = (redis.call('STRLEN', key) - RHDR) / 8
    if count + fill <= room then
      redis.call('SETRANGE', key, RHDR + 8 * count, string.rep(entry, fill))
    else
      local grown = math.min(limit, math.max(count + fill, 2 * room))
      redis.call('SET', key, redis.call('GETRANGE', key, 0, RHDR + 8 * count - 1) ..
        string.rep(entry, fill) .. string.rep('\0', 8 * (grown - count - fill)), 'PX', ttl(window))
    end
    count, cost = count + fill, cost - fill
  end
  if cost > 0 then
    -- Full: overwrite the cost oldest (check proved them gone), wrapping.
    local first = math.min(cost, count - head)
    redis.call('SETRANGE', key, RHDR + 8 * head, string.rep(entry, first))
    if cost > first then
      redis.call('SETRANGE', key, RHDR, string.rep(entry, cost - first))
    end
    head = (head + cost) % count
  end
  redis.call('SETRANGE', key, 6, enc(head, 3) .. enc(count, 3))
  redis.call('PEXPIRE', key, ttl(window))
  return ep
end

local function bucket(key, cost, capacity, interval)
  local tat = now
  local ep = nil
  local stored = redis.call('GET', key)
  if stored then
    local v, e = string.match(stored, '^(%d+):(%d+)$')
    if v == nil then
      error('redisstore: token bucket ' .. key .. ': malformed state')
    end
    v, ep = tonumber(v), e
    if v > tat then
      tat = v
    end
  end
  local full = capacity * interval
  local new = tat + cost * interval
  if new - now <= full then
    return true, floordiv(full - (new - now), interval), new - now, 0, new, ep
  end
  return false, math.max(0, floordiv(full - (tat - now), interval)), tat - now,
    new - now - full, nil, ep
end

local function fixed(key, cost, limit, window)
  local idx = floordiv(now, window)
  local count = 0
  local ep = nil
  local stored = redis.call('GET', key)
  if stored then
    local si, sc, e = string.match(stored, '^(%d+):(%d+):(%d+)$')
    if si == nil then
      error('redisstore: fixed window ' .. key .. ': malformed state')
    end
    ep = e
    if tonumber(si) == idx then
      count = tonumber(sc)
    end
  end
  local left = (idx + 1) * window - now -- until the window's end
  if count + cost <= limit then
    return true, limit - count - cost, left, 0, fmt(idx) .. ':' .. fmt(count + cost), ep
  end
  return false, math.max(0, limit - count), left, left, nil, ep
end

-- write records an allowed hit: val and left are what its check returned,
-- ep the epoch of its state.
local function write(key, id, alg, cost, limit, window, val, left, ep)
  if alg == 's' then
    recordSliding(key, cost, limit, window, ep)
  elseif alg == 't' then
    redis.call('SET', key, fmt(val) .. ':' .. ep, 'PX', fmt(ceildiv(val - now, 1000)))
  else
    redis.call('SET', key, val .. ':' .. ep, 'PX', fmt(ceildiv(left, 1000)))
  end
end

-- A sliding-window counter: the string "<window index>:<previous
-- count>:<current count>:<epoch>". With t into the current window, a request is
-- admitted iff prev * (window - t) / window + cur + cost <= limit, all in
-- exact integers ((limit+1) * window < 2^53). memstore computes the same
-- formulas in nanoseconds.
local function counter(key, cost, limit, window)
  local idx = floordiv(now, window)
  local t = now - idx * window
  local prev, cur = 0, 0
  local ep = nil
  local stored = redis.call('GET', key)
  if stored then
    local si, sp, sc, e = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
    if si == nil then
      error('redisstore: sliding-window counter ' .. key .. ': malformed state')
    end
    ep = e
    si = tonumber(si)
    if si == idx then
      prev, cur = tonumber(sp), tonumber(sc)
    elseif si == idx - 1 then
      prev = tonumber(sc)
    end
  end
  local w = ceildiv(prev * (window - t), window) -- the previous window's weight
  if w + cur + cost <= limit then
    -- Full again when the window after this one starts; the state lives
    -- as long.
    return true, limit - w - cur - cost, 2 * window - t, 0,
      fmt(idx) .. ':' .. fmt(prev) .. ':' .. fmt(cur + cost), ep
  end
  local reset = 0
  if cur > 0 then
    reset = 2 * window - t
  elseif prev > 0 then
    reset = window - t
  end
  local remaining = math.max(0, limit - w - cur)
  local r = limit - cur - cost
  if r >= 0 then
    -- This window admits it once prev * (window - t) / window <= r.
    local at = window - floordiv(r * window, prev)
    if at < window then
      return false, remaining, reset, at - t, nil, ep
    end
  end
  -- The next window, where cur is the previous count, admits it once
  -- cur * (window - t) / window <= limit - cost.
  local at = 0
  if cur > 0 then
    at = math.max(0, window - floordiv((limit - cost) * window, cur))
  end
  return false, remaining, reset, window - t + at, nil, ep
end

local out = {now}
local o = 1 -- values in out
local ki = 1 -- next key
local ai = 3 -- next argument
local algs, costs, limits, windows, vals, lefts, eps -- per hit of a group of several
for _ = 1, tonumber(ARGV[2]) do
  local id = ARGV[ai]
  local epoch = ARGV[ai + 1]
  local n = tonumber(ARGV[ai + 2])
  ai = ai + 3
  local all = true
  local k0, o0 = ki, o
  if n > 1 and algs == nil then
    algs, costs, limits, windows, vals, lefts, eps = {}, {}, {}, {}, {}, {}, {}
  end
  for h = 1, n do
    local alg = ARGV[ai]
    local cost = tonumber(ARGV[ai + 1])
    -- "s", "f", "c": limit and window; "t": capacity and interval
    local limit, window = tonumber(ARGV[ai + 2]), tonumber(ARGV[ai + 3])
    local key = KEYS[ki]
    ai = ai + 4
    ki = ki + 1
    local ok, remaining, reset, retry, val, ep
    if alg == 's' then
      ok, remaining, reset, retry, val, ep = sliding(key, cost, limit, window)
    elseif alg == 't' then
      local capacity, interval = limit, window
      ok, remaining, reset, retry, val, ep = bucket(key, cost, capacity, interval)
    elseif alg == 'f' then
      ok, remaining, reset, retry, val, ep = fixed(key, cost, limit, window)
    elseif alg == 'c' then
      ok, remaining, reset, retry, val, ep = counter(key, cost, limit, window)
    else
      error('redisstore: unknown algorithm ' .. tostring(alg))
    end
    ep = ep or epoch
    out[o + 1] = ok and 1 or 0
    out[o + 2] = remaining
    out[o + 3] = reset
    out[o + 4] = retry
    out[o + 5] = 0
    if n == 1 then
      -- A group of one hit records at once.
      if ok and record then
        write(key, id, alg, cost, limit, window, val, reset, ep)
        out[o + 5] = tonumber(ep)
      end
    else
      all = all and ok
      algs[h], costs[h], limits[h], windows[h], vals[h], lefts[h], eps[h] = alg, cost, limit, window, val, reset, ep
    end
    o = o + 5
  end
  if n > 1 and record and all then
    for h = 1, n do
      write(KEYS[k0 + h - 1], id, algs[h], costs[h], limits[h], windows[h], vals[h], lefts[h], eps[h])
      out[o0 + 5 * h] = tonumber(eps[h])
    end
  end
end
return out
