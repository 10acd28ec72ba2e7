-- refund.lua: undo what the take with identifier id recorded for some
-- hits, idempotently.
--
-- KEYS: two keys per hit, in the order of the hits:
--   the state key    <prefix>{<rule>:<key>}:s, :t, :f or :c (see take.lua)
--   a tombstone key  <prefix>{<rule>:<key>}:r:<alg>:<id> (alg "t", "f" or "c"),
--                    a tiny string that marks the refund as done (passed
--                    but unused for a sliding window)
-- ARGV[1]  id, the take's identifier
-- then for each hit, 4 values:
--   alg     "s" sliding window, "t" token bucket, "f" fixed window
--   cost    units the hit counted for
--   a       "s", "c": unused; "t": the emission interval T in us; "f": the
--           window W in us
--   ttl     "c": unused (the state key's PTTL); otherwise how long the
--           tombstone lives, in ms (at least as long as the
--           take can still weigh on the state)
-- Reply: an integer, the number of hits whose state the refund changed.
-- Sliding window: ZREM the take's members (id, id.1, ...), naturally
-- idempotent; an id that Take never recorded changes nothing.
-- Token bucket: once per id (SET tombstone NX PX ttl), move the TAT back by
-- cost * T, not before now. Fixed window: once per id, lower the current
-- window's count by cost, not below 0.
-- Time: redis.call('TIME'), integer microseconds.
-- Requires Redis 5.0 or later (see take.lua).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

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

local id = ARGV[1]
local changed = 0
local ai = 2
local ki = 1
while ki <= #KEYS do
  local key, tomb = KEYS[ki], KEYS[ki + 1]
  local alg = ARGV[ai]
  local cost = tonumber(ARGV[ai + 1])
  local a = tonumber(ARGV[ai + 2])
  local ttl = ARGV[ai + 3]
  ki = ki + 2
  ai = ai + 4
  if alg == 's' then
    local i = 0
    while i < cost do
      local args = {'ZREM', key}
      local last = math.min(cost, i + 100)
      while i < last do
        if i == 0 then
          args[#args + 1] = id
        else
          args[#args + 1] = id .. '.' .. i
        end
        i = i + 1
      end
      if redis.call(unpack(args)) > 0 then
        changed = changed + 1
      end
    end
  elseif alg == 't' or alg == 'f' then
    if redis.call('SET', tomb, '1', 'NX', 'PX', ttl) then
      local stored = redis.call('GET', key)
      if alg == 't' and stored then
        local tat = tonumber(stored)
        if tat ~= nil and tat > now then
          tat = math.max(now, tat - cost * a)
          if tat > now then
            redis.call('SET', key, fmt(tat), 'PX', fmt(ceildiv(tat - now, 1000)))
          else
            redis.call('DEL', key)
          end
          changed = changed + 1
        end
      elseif alg == 'f' and stored then
        local si, sc = string.match(stored, '^(%d+):(%d+)$')
        local idx = floordiv(now, a)
        if si ~= nil and tonumber(si) == idx and tonumber(sc) > 0 then
          local count = math.max(0, tonumber(sc) - cost)
          if count > 0 then
            local left = (idx + 1) * a - now
            redis.call('SET', key, fmt(idx) .. ':' .. fmt(count), 'PX', fmt(ceildiv(left, 1000)))
          else
            redis.call('DEL', key)
          end
          changed = changed + 1
        end
      end
    end
  elseif alg == 'c' then
    -- Once per id, for as long as the state lives (its PTTL: the take
    -- weighs on it no longer): lower the current count by cost, then the
    -- previous one with what is left. Stale state (older windows) is
    -- zeroed by the next take anyway.
    local stored = redis.call('GET', key)
    local pttl = redis.call('PTTL', key)
    if stored and pttl > 0 and redis.call('SET', tomb, '1', 'NX', 'PX', pttl) then
      local si, sp, sc = string.match(stored, '^(%d+):(%d+):(%d+)$')
      if si ~= nil then
        local cur, prev = tonumber(sc), tonumber(sp)
        local fromCur = math.min(cur, cost)
        cur = cur - fromCur
        prev = math.max(0, prev - (cost - fromCur))
        redis.call('SET', key, si .. ':' .. fmt(prev) .. ':' .. fmt(cur), 'PX', pttl)
        changed = changed + 1
      end
    end
  else
    error('redisstore: unknown algorithm ' .. tostring(alg))
  end
end
return changed
