-- take.lua: check groups of rate-limit hits and record each group that is
-- entirely within its limits. One call carries one or more independent
-- groups (one group per floodgate Take); a group is all-or-nothing, and a
-- later group sees what an earlier group of the same call recorded.
--
-- KEYS: one state key per hit, in the order of the hits over all groups,
-- <prefix>{<rule>:<key>}:<alg>:<window> (see the package documentation):
--   s  sliding window  ZSET, one member per unit of cost of an admitted
--                      request, score = server time in us
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
--   id      the take's identifier; members of a sliding window are id,
--           id.1, id.2, ... for a cost of 1, 2, 3, ...
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
-- recorded the hit (0 when nothing was recorded, and for a sliding
-- window). A hit of a denied group may report allowed 1: it was within its
-- own limit, but nothing of its group was recorded.
-- Time: redis.call('TIME'), integer microseconds; never a client's clock.
-- Requires Redis 5.0 or later (effects replication of scripts that read TIME
-- before writing; ZADD NX needs 3.0.2).

local record = ARGV[1] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Fast path: a call of one group of one sliding-window hit of cost 1 that
-- records, the common case at light load (a Take sent alone). It does what
-- the general path below does for it, without building the general path's
-- functions, which costs a few microseconds per call; a denial falls
-- through to the general path, which reports its durations.
if ARGV[1] == '1' and ARGV[2] == '1' and ARGV[5] == '1' and ARGV[6] == 's' and ARGV[7] == '1' then
  local key, id = KEYS[1], ARGV[3]
  local limit, window = tonumber(ARGV[8]), tonumber(ARGV[9])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now - window))
  local n = redis.call('ZCARD', key)
  if n < limit then
    local score = string.format('%.0f', now)
    if redis.call('ZADD', key, 'NX', score, id) == 0 then
      local seq = 0 -- a reused id: see recordSliding
      repeat
        seq = seq + 1
      until redis.call('ZADD', key, 'NX', score, id .. '#' .. score .. '.' .. seq) == 1
    end
    -- window / 1000 is correctly rounded and window < 2^53, so its ceiling
    -- is exact.
    redis.call('PEXPIRE', key, string.format('%.0f', math.ceil(window / 1000)))
    return {now, 1, limit - n - 1, window, 0, 0}
  end
end

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

-- Strings computed once per call: the time, and the trim cutoff and TTL
-- of the last window seen (one rule's window, usually).
local nowstr = fmt(now)
local cutWindow, cutStr, ttlWindow, ttlStr
local function cutoff(window)
  if window ~= cutWindow then
    cutWindow, cutStr = window, fmt(now - window)
  end
  return cutStr
end
local function ttl(window)
  if window ~= ttlWindow then
    ttlWindow, ttlStr = window, fmt(ceildiv(window, 1000))
  end
  return ttlStr
end

-- Each check returns allowed, remaining, reset_after, retry_after, when
-- allowed the value that record needs (nil for a sliding window), and the
-- epoch of the state it found (nil if none).
-- Checks write nothing, except that a sliding window in record mode first
-- trims the entries that left the window (which changes no count).

local function sliding(key, cost, limit, window)
  local n
  if record then
    -- Trim, then count what is left, all in (now-window, now]: on a
    -- compact (listpack) set this is cheaper than ZCOUNT, which walks the
    -- entries in range.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', cutoff(window))
    n = redis.call('ZCARD', key)
  else
    n = redis.call('ZCOUNT', key, '(' .. cutoff(window), '+inf')
  end
  if n + cost <= limit then
    return true, limit - n - cost, window, 0
  end
  local after = '(' .. cutoff(window)
  local k = n + cost - limit - 1 -- the entry whose expiry frees enough room
  local kth = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', fmt(k), '1')
  local newest = redis.call('ZREVRANGEBYSCORE', key, '+inf', after, 'WITHSCORES', 'LIMIT', '0', '1')
  if kth[2] == nil or newest[2] == nil then
    error('redisstore: sliding window ' .. key .. ': cost above the limit')
  end
  return false, math.max(0, limit - n), tonumber(newest[2]) + window - now,
    tonumber(kth[2]) + window - now
end

local function recordSliding(key, id, cost, window)
  local added
  if cost == 1 then
    added = redis.call('ZADD', key, 'NX', nowstr, id)
  else
    added = 0
    local i = 0
    while i < cost do -- in chunks, to stay clear of Lua's stack limit
      local args = {'ZADD', key, 'NX'}
      local last = math.min(cost, i + 100)
      while i < last do
        args[#args + 1] = nowstr
        if i == 0 then
          args[#args + 1] = id
        else
          args[#args + 1] = id .. '.' .. i
        end
        i = i + 1
      end
      added = added + redis.call(unpack(args))
    end
  end
  -- A caller that reuses an id must still be counted: add the members
  -- that already existed under names of their own.
  local seq = 0
  while added < cost do
    seq = seq + 1
    added = added + redis.call('ZADD', key, 'NX', nowstr, id .. '#' .. nowstr .. '.' .. seq)
  end
  redis.call('PEXPIRE', key, ttl(window))
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
local function write(key, id, alg, cost, window, val, left, ep)
  if alg == 's' then
    recordSliding(key, id, cost, window)
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
local algs, costs, windows, vals, lefts, eps -- per hit of a group of several
for _ = 1, tonumber(ARGV[2]) do
  local id = ARGV[ai]
  local epoch = ARGV[ai + 1]
  local n = tonumber(ARGV[ai + 2])
  ai = ai + 3
  local all = true
  local k0, o0 = ki, o
  if n > 1 and algs == nil then
    algs, costs, windows, vals, lefts, eps = {}, {}, {}, {}, {}, {}
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
      ok, remaining, reset, retry = sliding(key, cost, limit, window)
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
        write(key, id, alg, cost, window, val, reset, ep)
        if alg ~= 's' then
          out[o + 5] = tonumber(ep)
        end
      end
    else
      all = all and ok
      algs[h], costs[h], windows[h], vals[h], lefts[h], eps[h] = alg, cost, window, val, reset, ep
    end
    o = o + 5
  end
  if n > 1 and record and all then
    for h = 1, n do
      write(KEYS[k0 + h - 1], id, algs[h], costs[h], windows[h], vals[h], lefts[h], eps[h])
      if algs[h] ~= 's' then
        out[o0 + 5 * h] = tonumber(eps[h])
      end
    end
  end
end
return out
