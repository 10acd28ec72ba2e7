-- take.lua: check groups of rate-limit hits and record each group that is
-- entirely within its limits. One call carries one or more independent
-- groups (one group per floodgate Take); a group is all-or-nothing, and a
-- later group sees what an earlier group of the same call recorded.
--
-- KEYS: one state key per hit, in the order of the hits over all groups:
--   sliding window  <prefix>{<rule>:<key>}:s  ZSET, one member per unit of
--                   cost of an admitted request, score = server time in us
--   token bucket    <prefix>{<rule>:<key>}:t  string, the theoretical
--                   arrival time (TAT) in us
--   fixed window    <prefix>{<rule>:<key>}:f  string "<window index>:<count>"
-- ARGV[1]  mode: "1" records the groups that are allowed (Take), "0"
--          records nothing and writes nothing (Peek)
-- ARGV[2]  number of groups G
-- then for each group:
--   id      the take's identifier; members of a sliding window are id,
--           id.1, id.2, ... for a cost of 1, 2, 3, ...
--   n       number of hits of the group
--   then for each hit, 4 values:
--     alg     "s" sliding window, "t" token bucket, "f" fixed window
--     cost    units this hit counts for (1..capacity)
--     a       "s", "f": the limit L; "t": the capacity B
--     b       "s", "f": the window W in us; "t": the emission interval T in
--             us, ceil(W / L)
-- Reply: a flat array of 4 integers per hit, in KEYS order:
--   allowed (1 or 0), remaining, reset_after (us), retry_after (us; 0 when
--   allowed). A hit of a denied group may report allowed 1: it was within
--   its own limit, but nothing of its group was recorded.
-- Time: redis.call('TIME'), integer microseconds; never a client's clock.
-- Requires Redis 5.0 or later (effects replication of scripts that read TIME
-- before writing; ZADD NX needs 3.0.2).

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

-- Each check returns allowed, remaining, reset_after, retry_after and, for
-- record, a function that records the hit.

local function sliding(key, id, cost, limit, window)
  local after = '(' .. fmt(now - window) -- the window is (now-window, now]
  if record then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - window))
  end
  local n = redis.call('ZCOUNT', key, after, '+inf')
  if n + cost <= limit then
    return true, limit - n - cost, window, 0, function()
      local score = fmt(now)
      local added = 0
      local i = 0
      while i < cost do -- in chunks, to stay clear of Lua's stack limit
        local args = {'ZADD', key, 'NX'}
        local last = math.min(cost, i + 100)
        while i < last do
          args[#args + 1] = score
          if i == 0 then
            args[#args + 1] = id
          else
            args[#args + 1] = id .. '.' .. i
          end
          i = i + 1
        end
        added = added + redis.call(unpack(args))
      end
      -- A caller that reuses an id must still be counted: add the members
      -- that already existed under names of their own.
      local seq = 0
      while added < cost do
        seq = seq + 1
        added = added + redis.call('ZADD', key, 'NX', score, id .. '#' .. fmt(now) .. '.' .. seq)
      end
      redis.call('PEXPIRE', key, fmt(ceildiv(window, 1000)))
    end
  end
  local k = n + cost - limit - 1 -- the entry whose expiry frees enough room
  local kth = redis.call('ZRANGEBYSCORE', key, after, '+inf', 'WITHSCORES', 'LIMIT', fmt(k), '1')
  local newest = redis.call('ZREVRANGEBYSCORE', key, '+inf', after, 'WITHSCORES', 'LIMIT', '0', '1')
  if kth[2] == nil or newest[2] == nil then
    error('redisstore: sliding window ' .. key .. ': cost above the limit')
  end
  return false, math.max(0, limit - n), tonumber(newest[2]) + window - now,
    tonumber(kth[2]) + window - now, nil
end

local function bucket(key, cost, capacity, interval)
  local tat = now
  local stored = redis.call('GET', key)
  if stored then
    local v = tonumber(stored)
    if v == nil then
      error('redisstore: token bucket ' .. key .. ': malformed state')
    end
    if v > tat then
      tat = v
    end
  end
  local full = capacity * interval
  local new = tat + cost * interval
  if new - now <= full then
    return true, floordiv(full - (new - now), interval), new - now, 0, function()
      redis.call('SET', key, fmt(new), 'PX', fmt(ceildiv(new - now, 1000)))
    end
  end
  return false, math.max(0, floordiv(full - (tat - now), interval)), tat - now,
    new - now - full, nil
end

local function fixed(key, cost, limit, window)
  local idx = floordiv(now, window)
  local count = 0
  local stored = redis.call('GET', key)
  if stored then
    local si, sc = string.match(stored, '^(%d+):(%d+)$')
    if si == nil then
      error('redisstore: fixed window ' .. key .. ': malformed state')
    end
    if tonumber(si) == idx then
      count = tonumber(sc)
    end
  end
  local left = (idx + 1) * window - now -- until the window's end
  if count + cost <= limit then
    return true, limit - count - cost, left, 0, function()
      redis.call('SET', key, fmt(idx) .. ':' .. fmt(count + cost), 'PX', fmt(ceildiv(left, 1000)))
    end
  end
  return false, math.max(0, limit - count), left, left, nil
end

local out = {}
local ki = 1 -- next key
local ai = 3 -- next argument
for _ = 1, tonumber(ARGV[2]) do
  local id = ARGV[ai]
  local n = tonumber(ARGV[ai + 1])
  ai = ai + 2
  local all = true
  local writes = {}
  local first = #out
  for h = 1, n do
    local alg = ARGV[ai]
    local cost = tonumber(ARGV[ai + 1])
    local a = tonumber(ARGV[ai + 2])
    local b = tonumber(ARGV[ai + 3])
    local key = KEYS[ki]
    ai = ai + 4
    ki = ki + 1
    local ok, remaining, reset, retry, write
    if alg == 's' then
      ok, remaining, reset, retry, write = sliding(key, id, cost, a, b)
    elseif alg == 't' then
      ok, remaining, reset, retry, write = bucket(key, cost, a, b)
    elseif alg == 'f' then
      ok, remaining, reset, retry, write = fixed(key, cost, a, b)
    else
      error('redisstore: unknown algorithm ' .. tostring(alg))
    end
    all = all and ok
    writes[h] = write
    local allowed = 0
    if ok then
      allowed = 1
    end
    out[first + 4 * h - 3] = allowed
    out[first + 4 * h - 2] = remaining
    out[first + 4 * h - 1] = reset
    out[first + 4 * h] = retry
  end
  if record and all then
    for h = 1, n do
      writes[h]()
    end
  end
end
return out
