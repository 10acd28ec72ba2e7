-- rewrite.lua: refund.lua's and renew.lua's prelude after ring.lua: a ring
-- read whole (GET) and written anew, which take.lua never does. It reads
-- no KEYS or ARGV and writes nothing. Requires Redis 5.0 or later.

-- ringEpoch returns the epoch of the ring stored, nil if it has no header.
local function ringEpoch(stored)
  if stored and #stored >= HDR then
    return (unpack(HEADER, stored, #stored - HDR + 1))
  end
end

-- ringTimes decodes the whole ring stored: its epoch, base and times,
-- oldest first.
local function ringTimes(what, key, stored)
  local ep, head, count, _, base = unpack(HEADER, stored, #stored - HDR + 1)
  if count == 0 or head >= count or #stored ~= W * count + HDR then
    error('redisstore: ' .. what .. ' ' .. key .. ': malformed state')
  end
  local times = {}
  for i = 0, count - 1 do
    times[i + 1] = base + unpack('<I6', stored, W * ((head + i) % count) + 1)
  end
  return ep, base, times
end

-- ringRemove removes from times (oldest first) those out of the window
-- (at or before cut) and the cost oldest at or after at: the take's own,
-- or entries of its instant (alike, whichever take recorded them), or
-- older ones where the clock had stepped back behind the ring's newest
-- entry, which take.lua then records the take at: never more than the
-- take holds (memstore's entry.remove). It returns the times kept, in
-- order, and how many at or after at it removed.
local function ringRemove(times, cost, at, cut)
  local kept, removed = {}, 0
  for _, v in ipairs(times) do
    if removed < cost and v >= at then
      removed = removed + 1
    elseif v > cut then
      kept[#kept + 1] = v
    end
  end
  return kept, removed
end

-- ringWrite writes a ring of the epoch ep whole from times (oldest first,
-- each in the window, each within 2^48 us of base): head 0, first 0, with
-- the TTL a take gives, until the newest time leaves the window.
local function ringWrite(key, ep, base, times, window)
  local parts = {}
  for i = 1, #times do
    parts[i] = pack('<I6', times[i] - base)
  end
  local newest = times[#times]
  parts[#parts + 1] = pack(HEADER, ep, 0, #times, 0, base, times[1] - base, newest - base)
  redis.call('SET', key, table.concat(parts), 'PX', ttl(newest + window))
end
