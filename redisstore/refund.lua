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
--   alg     "s" sliding window (key letter w, or h for leases), "t" token
--           bucket, "f" fixed window, "c" sliding-window counter
--   cost    units the hit counted for
--   window  the window W in us; "t": the emission interval T in us
--   at      the server time of the take, in us (take.lua's reply)
--   epoch   the epoch of the state that recorded the hit (take.lua's
--           reply); a state with another epoch does not hold the take
-- Reply: an integer, the number of hits whose state the refund changed.
-- Each credit is made once per take (SET tomb NX), and only while it
-- could weigh: a sliding window's while the take's time is in the window
-- (its cost oldest entries at or after that time removed, the live ones
-- written back in order, or the key deleted when none is left); a token
-- bucket's TAT moved back by max(0, cost * T - (now - at)), cost * T at
-- most 2^52 us as memstore bounds it, not before now; a fixed window's or
-- counter's current count lowered by cost, not below 0, if at and now lie
-- in the same window. The tombstone lives as long as a later refund could
-- still credit something; no credit, no tombstone.
-- Requires Redis 5.0 or later (ring.lua).

local nhits = #KEYS / 2
if #KEYS % 2 ~= 0 or #ARGV ~= 5 * nhits then
  error('redisstore: refund: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments: want 2 and 5 per hit')
end

-- done marks the refund done until the time e; false if it was.
local function done(tomb, e)
  return redis.call('SET', tomb, '1', 'NX', 'PX', ttl(e))
end

local changed = 0
for i = 1, nhits do
  local a, key, tomb = 5 * i - 5, KEYS[2 * i - 1], KEYS[2 * i]
  local alg, cost, window, at, epoch = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), ARGV[a + 5]
  if alg == 's' then
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
    -- Until max(now, at) + credit: a lease given back before its end was
    -- stamped after now, and a later refund of it could credit again.
    if credit > 0 and ep == epoch and tat ~= nil and tat > now and done(tomb, math.max(now, at) + credit) then
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
      local si, sp, sc, ep -- sp: a counter's previous count
      if alg == 'f' then
        si, sc, ep = string.match(stored, '^(%d+):(%d+):(%d+)$')
      else
        si, sp, sc, ep = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
      end
      if ep == epoch and tonumber(si) == idx and tonumber(sc) > 0 and done(tomb, ends) then
        local count = math.max(0, tonumber(sc) - cost)
        if alg == 'f' and count > 0 then
          redis.call('SET', key, si .. ':' .. fmt(count) .. ':' .. ep, 'PX', ttl(ends))
        elseif alg == 'c' and (count > 0 or tonumber(sp) > 0) then
          -- Until the next window ends, as take.lua sets it.
          redis.call('SET', key, si .. ':' .. sp .. ':' .. fmt(count) .. ':' .. ep, 'PX', ttl(ends + window))
        else
          redis.call('DEL', key) -- nothing left: as if never seen
        end
        changed = changed + 1
      end
    end
  else
    error('redisstore: unknown algorithm ' .. tostring(alg))
  end
end
return changed
