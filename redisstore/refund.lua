-- refund.lua: undo what takes recorded for some of their hits,
-- idempotently, crediting only what provably remains of the take, so
-- that a refund never lets a key admit more than its limit. The proof is
-- on floodgate.Store.Refund; this script follows it. ring.lua and
-- rewrite.lua come first.
--
-- KEYS: two keys per hit, in the order of the hits:
--   key   the state key <prefix>{<rule>:<key>}:<letter>:<window> (take.lua)
--   tomb  the tombstone key of the hit's take (rediskeys.Tombstone): a
--         tiny string that marks the take's refund as done
-- ARGV: for each hit, 5 values:
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
-- the ring and write back its live entries, in order, with the TTL a take
-- gives (O(limit), on a rare path); or delete the key when none is left.
-- Token bucket: once per take, move the TAT back by max(0, cost * T -
-- (now - at)), not before now. cost * T is taken at most 2^52 us: no take
-- moves a TAT further (take.lua's AHEAD bounds an overdraw hit's move), as
-- memstore bounds it.
-- Fixed window and sliding-window counter: only if at and now lie in the
-- same window, once per take, lower the current window's count by cost, not
-- below 0; otherwise credit nothing.
-- A tombstone lives as long as a later refund of the take could still credit
-- something: a sliding window's once the take leaves the window, a token
-- bucket's credit within cost * T - (now - at), and a window's once the
-- window ends. No credit, no tombstone. TTLs are ring.lua's ttl.
-- Requires Redis 5.0 or later (ring.lua).

local nhits = #KEYS / 2
if #KEYS % 2 ~= 0 or #ARGV ~= 5 * nhits then
  error('redisstore: refund: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments: want 2 and 5 per hit')
end

-- done marks the refund of a take done for as long as it could credit
-- something, until the time e; false if it was done already.
local function done(tomb, e)
  return redis.call('SET', tomb, '1', 'NX', 'PX', ttl(e))
end

local changed = 0
for i = 1, nhits do
  local key, tomb = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 5 * (i - 1)
  local alg, cost, window, at, epoch = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), ARGV[a + 5]
  if alg == 's' then
    -- Remove the cost oldest entries at or after the take's time: the
    -- take's own, or entries of its instant (alike, whichever take
    -- recorded them), or older ones where the clock had stepped back
    -- behind the ring's newest entry, which take.lua then records the
    -- take at: never more than the take holds (memstore's entry.remove).
    -- Every entry kept fits the base it was written with: the base stays.
    local stored = redis.call('GET', key)
    if ringEpoch(stored) == tonumber(epoch) and at > now - window and done(tomb, at + window) then
      local ep, base, times = ringTimes('sliding window', key, stored)
      local kept, removed = ringRemove(times, cost, at, now - window)
      if removed > 0 then
        if #kept == 0 then
          redis.call('DEL', key) -- nothing else in the window
        else
          ringWrite(key, ep, base, kept, window)
        end
        changed = changed + 1
      end
    end
  elseif alg == 't' then
    local credit = math.min(cost * window, 2 ^ 52) - (math.max(0, now - at))
    local stored = redis.call('GET', key)
    local tat, ep = nil, nil
    if stored then
      tat, ep = string.match(stored, '^(%d+):(%d+)$')
      tat = tonumber(tat)
    end
    if credit > 0 and ep == epoch and tat ~= nil and tat > now and done(tomb, now + credit) then
      tat = math.max(now, tat - credit)
      if tat > now then
        redis.call('SET', key, fmt(tat) .. ':' .. ep, 'PX', ttl(tat))
      else
        redis.call('DEL', key)
      end
      changed = changed + 1
    end
  elseif alg == 'f' or alg == 'c' then
    local idx = floordiv(now, window)
    local stored = redis.call('GET', key)
    local ends = (idx + 1) * window -- the window's end
    -- A take stamped after now (a clock that stepped back) may lie in a
    -- later window than now's: no credit.
    if at <= now and floordiv(at, window) == idx and stored then
      if alg == 'f' then
        local si, sc, ep = string.match(stored, '^(%d+):(%d+):(%d+)$')
        if ep == epoch and tonumber(si) == idx and tonumber(sc) > 0 and done(tomb, ends) then
          local count = math.max(0, tonumber(sc) - cost)
          if count > 0 then
            redis.call('SET', key, si .. ':' .. fmt(count) .. ':' .. ep, 'PX', ttl(ends))
          else
            redis.call('DEL', key)
          end
          changed = changed + 1
        end
      else
        local si, sp, sc, ep = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
        if ep == epoch and tonumber(si) == idx and tonumber(sc) > 0 and done(tomb, ends) then
          local cur = math.max(0, tonumber(sc) - cost)
          if cur > 0 or tonumber(sp) > 0 then
            -- Until the next window ends, as take.lua sets it.
            redis.call('SET', key, si .. ':' .. sp .. ':' .. fmt(cur) .. ':' .. ep, 'PX', ttl(ends + window))
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
