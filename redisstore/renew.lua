-- renew.lua: renew leases (floodgate.Concurrency hits): move each lease's
-- entries in its key's ring to now, atomically, if they still hold their
-- slots. The contract, and why the entries found are the lease's own, are
-- on floodgate.Store.Renew; this script follows it. ring.lua and
-- rewrite.lua come first.
--
-- KEYS: two keys per lease, in order:
--   key   the state key <prefix>{<rule>:<key>}:h:<window> (a ring, ring.lua)
--   tomb  the tombstone key of the take's refund (refund.lua): a lease
--         refunded (released) is never renewed
-- ARGV: for each lease, 4 values:
--   cost    entries the lease holds
--   window  the lease's time to live W in us
--   at      the lease's time in us: the take's, or its last renewal's
--   epoch   the epoch of the state that recorded the take
-- Reply: an integer per lease: its new time in us, or 0 when it no longer
-- holds its slots (another state, its time out of the window, refunded,
-- no entry at or after its time), and nothing is written for it.
-- A lease that holds: its cost oldest entries at or after at move to t =
-- max(now, the newest kept), as take.lua records a take; the live entries
-- are written back in order, rebased on the oldest, with a take's TTL.
-- Requires Redis 5.0 or later (ring.lua).

local n = #KEYS / 2
if #KEYS % 2 ~= 0 or #ARGV ~= 4 * n then
  error('redisstore: renew: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments: want 2 and 4 per lease')
end

local out = {}
for i = 1, n do
  local a, key, tomb = 4 * i - 4, KEYS[2 * i - 1], KEYS[2 * i]
  local cost, window, at, epoch = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4])
  out[i] = 0
  local stored = redis.call('GET', key)
  if ringEpoch(stored) == epoch and at > now - window and redis.call('EXISTS', tomb) == 0 then
    local ep, _, times = ringTimes('lease', key, stored)
    local kept, moved = ringRemove(times, cost, at, now - window)
    if moved > 0 then
      local t = math.max(now, kept[#kept] or now)
      for _ = 1, moved do
        kept[#kept + 1] = t
      end
      if t - kept[1] >= 2 ^ 48 then
        error('redisstore: lease ' .. key .. ': an entry older than 2^48 us (a window longer than 8.9 years)')
      end
      ringWrite(key, ep, kept[1], kept, window) -- offsets from the oldest entry
      out[i] = t
    end
  end
end
return out
