-- refund.lua: undo what the take with identifier id recorded for some
-- hits, idempotently, crediting only what provably remains of the take, so
-- that a refund never lets a key admit more than its limit.
--
-- KEYS: two keys per hit, in the order of the hits:
--   the state key    <prefix>{<rule>:<key>}:s, :t, :f or :c (see take.lua)
--   a tombstone key  <prefix>{<rule>:<key>}:r:<alg>:<id> (alg "t", "f" or "c"),
--                    a tiny string that marks the refund as done (passed
--                    but unused for a sliding window)
-- ARGV[1]  id, the take's identifier
-- ARGV[2]  age: the time since the take was sent, in us, measured on the
--          caller's monotonic clock. The take was recorded after it was
--          sent, so it happened in [now - age, now] of the server's clock,
--          whatever the skew between the clocks.
-- then for each hit, 4 values:
--   alg     "s" sliding window, "t" token bucket, "f" fixed window, "c"
--           sliding-window counter
--   cost    units the hit counted for
--   a       "s": unused; "t": the emission interval T in us; "f", "c": the
--           window W in us
--   ttl     "t": how long the tombstone may have to live, in ms (at least
--           cost * T); otherwise unused
-- Reply: an integer, the number of hits whose state the refund changed.
-- Sliding window: ZREM the take's members (id, id.1, ...), naturally
-- idempotent; an id that Take never recorded changes nothing.
-- Token bucket: the take's part of the debt is at least cost * T - age
-- still (see memstore's entry.refund): once per id (SET tombstone NX),
-- move the TAT back by max(0, cost * T - age), not before now.
-- Fixed window and sliding-window counter: only if now - age and now lie in
-- the same window (the take is then certainly in the current one), once
-- per id, lower the current window's count by cost, not below 0; otherwise
-- credit nothing (a counter's previous window is never credited: the take
-- may not be in it).
-- A tombstone lives as long as a later refund of id could still credit
-- something: age only grows, so a token bucket's credit runs out within
-- cost * T, and a window's once the window ends. No credit, no tombstone.
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
local age = math.max(0, tonumber(ARGV[2]))
local changed = 0
local ai = 3
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
  elseif alg == 't' then
    local credit = cost * a - age
    if credit > 0 and redis.call('SET', tomb, '1', 'NX', 'PX', ttl) then
      local stored = redis.call('GET', key)
      local tat = nil
      if stored then
        tat = tonumber(stored)
      end
      if tat ~= nil and tat > now then
        tat = math.max(now, tat - credit)
        if tat > now then
          redis.call('SET', key, fmt(tat), 'PX', fmt(ceildiv(tat - now, 1000)))
        else
          redis.call('DEL', key)
        end
        changed = changed + 1
      end
    end
  elseif alg == 'f' or alg == 'c' then
    local idx = floordiv(now, a)
    local left = (idx + 1) * a - now -- until the window's end
    if floordiv(now - age, a) == idx and
        redis.call('SET', tomb, '1', 'NX', 'PX', fmt(ceildiv(left, 1000))) then
      local stored = redis.call('GET', key)
      if alg == 'f' and stored then
        local si, sc = string.match(stored, '^(%d+):(%d+)$')
        if si ~= nil and tonumber(si) == idx and tonumber(sc) > 0 then
          local count = math.max(0, tonumber(sc) - cost)
          if count > 0 then
            redis.call('SET', key, fmt(idx) .. ':' .. fmt(count), 'PX', fmt(ceildiv(left, 1000)))
          else
            redis.call('DEL', key)
          end
          changed = changed + 1
        end
      elseif alg == 'c' and stored then
        -- Only a state of this window holds the take: a state of an
        -- earlier one means the take is not recorded (a Reset since).
        local si, sp, sc = string.match(stored, '^(%d+):(%d+):(%d+)$')
        local pttl = redis.call('PTTL', key)
        if si ~= nil and tonumber(si) == idx and tonumber(sc) > 0 and pttl > 0 then
          local cur = math.max(0, tonumber(sc) - cost)
          redis.call('SET', key, si .. ':' .. sp .. ':' .. fmt(cur), 'PX', pttl)
          changed = changed + 1
        end
      end
    end
  else
    error('redisstore: unknown algorithm ' .. tostring(alg))
  end
end
return changed
