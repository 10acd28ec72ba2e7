-- take.lua: check groups of rate-limit hits and record each group whose
-- hits are within their limits (overdraw hits aside: see below). One call
-- carries one or more independent groups (one group per floodgate Take,
-- or one Peek); a group is all-or-nothing, and a later group sees what an
-- earlier group of the same call recorded. ring.lua comes first (now,
-- fmt, ttl, the ring's codec).
--
-- KEYS: one state key per hit, in the order of the hits over all groups,
-- <prefix>{<rule>:<key>}:<letter>:<window> (see the package documentation),
-- holding by its letter:
--   w  sliding window  the ring of the admitted requests' times (ring.lua)
--   t  token bucket    string "<TAT>:<epoch>", the theoretical arrival time
--                      in us
--   f  fixed window    string "<window index>:<count>:<epoch>"
--   c  sliding-window  string "<window index>:<previous count>:<current
--      counter         count>:<epoch>"
-- A group names each key once (the store rejects a group that does not).
-- The epoch names the state: the take that creates a state (the key is
-- absent) writes its group's epoch, and later takes keep it. A refund
-- credits only a state whose epoch is its take's (refund.lua).
-- ARGV: the groups one after another, each its epoch, then one figures
-- string per hit (a group ends where the next epoch starts: an epoch
-- starts with a digit, figures with a letter):
--   epoch    the epoch of a state this group creates: an integer from 1
--            to 2^48 - 1; "0" for a Peek, which records nothing
--   figures  "<alg> <cost> <limit> <window> <overdraw>":
--     alg       "s" sliding window (key letter w), "t" token bucket, "f"
--               fixed window, "c" sliding-window counter
--     cost      units this hit counts for (1..capacity; an overdraw
--               hit's up to 2^51, a sliding window's up to 100)
--     limit     "s", "f", "c": the limit L; "t": the capacity B
--     window    "s", "f", "c": the window W in us; "t": the emission
--               interval T in us, ceil(W / L)
--     overdraw  "1": the hit is recorded whenever the group's other hits
--               are, even past its limit, and the key owes the excess
--               (floodgate.Hit.Overdraw); "0": only within its limit
-- Reply: a flat array of integers: the server time in us, then 5 per hit,
-- in KEYS order: allowed (1 or 0), remaining (negative when the key holds
-- more than its limit), reset_after (us), retry_after (us; 0 when
-- allowed), and the epoch of the state that recorded the hit (0 when
-- nothing was recorded). A hit of a denied group may report allowed 1: it
-- was within its own limit, but nothing of its group was recorded. An
-- overdraw hit past its limit reports allowed 0, the key as it stands with
-- the hit (a denial of cost 1), and its epoch when recorded; one that
-- carried its state past its bound reports the epoch the state had, and
-- the state takes the next one, so no refund credits it.
-- Requires Redis 5.0 or later (ring.lua).
--
-- What a state holds past its limit (floodgate.Hit.Overdraw): this script
-- keeps the one copy of internal/algo's bounds (memstore's), each named
-- where it is used: a fixed window counts up to MAXCOUNT (twice its
-- limit, algo.MaxCount); a sliding-window counter up to twice its limit
-- and the count c with (c + 1) * window at most 2^53 us; a token bucket's
-- TAT runs up to AHEAD (a full bucket's refill time, at most ten years,
-- algo.Ahead) past a full bucket's; a ring keeps up to LOGDEBT (its
-- limit, at most bounds.SlidingCost) times past its limit. A hit that
-- would carry a state past its bound fills it, and the state takes the
-- epoch after its own, ep % (2^48 - 1) + 1. (Locals where they are used:
-- an upvalue costs every call, BENCHMARKS.md.)
--
-- Writes: every write of a ring starts with PEXPIRE, which cannot grow
-- memory, so that Redis at maxmemory (noeviction), which refuses only a
-- script's first write that may, lets the rest through and keeps
-- enforcing the limits (docs/RELIABILITY.md).

-- figures reads a hit's figures string.
local function figures(s)
  local alg, cost, limit, window, over = string.match(s, '^(%a) (%d+) (%d+) (%d+) ([01])$')
  if alg == nil then
    error('redisstore: take: malformed figures ' .. tostring(s))
  end
  return alg, tonumber(cost), tonumber(limit), tonumber(window), over == '1'
end

-- The sliding window. Every take reads the header alone (GETRANGE of the
-- last 34 bytes), and entries only to move first past those that have
-- just left the window: usually none or one, in one GETRANGE of up to
-- CHUNK slots. An append writes its entries and the header that follows
-- them in one SETRANGE, an overwrite of the oldest slots those and the
-- header. The ring is written whole (SET) when it is created, becomes
-- full (so that Redis allocates it exactly), has no entry left in the
-- window, when the limit changed, and past the limit; that SET, and a
-- rebase, keep only the live entries. A request of cost n is admitted
-- exactly when the live entries number at most limit - n, so a ring never
-- holds more than its limit but past it (an overdraw hit's), up to limit
-- + LOGDEBT, written whole with head 0. (Small rings read and written
-- whole cost Redis more per take, measured even at 4 entries.)
-- SPAN bounds an entry's offset from base. The header's range goes to
-- GETRANGE as strings: Redis formats a number with snprintf('%.17g').
local SPAN, CHUNK, HDRFROM, HDRTO = 2 ^ 48, 8, '-34', '-1'

-- ringOpen reads the header of the ring of key: a table of the key and
-- the header's fields, or nil if there is no ring.
local function ringOpen(key)
  local h = redis.call('GETRANGE', key, HDRFROM, HDRTO)
  if h == '' then
    return nil
  end
  if #h ~= HDR then
    malformed('sliding window', key)
  end
  local ep, head, count, first, base, tfirst, newest = headerFields(h, 1)
  if count == 0 or head >= count or first > count then
    malformed('sliding window', key)
  end
  return {key = key, ep = ep, head = head, count = count, first = first, base = base, tfirst = tfirst, newest = newest}
end

-- ringRead returns the times of the entries i to j (0 the oldest; j - i <
-- count) of the ring r, in a table indexed from i, with at most two
-- GETRANGEs (one unless they wrap).
local function ringRead(r, i, j)
  local out = {}
  while i <= j do
    local slot = (r.head + i) % r.count
    local n = math.min(j - i + 1, r.count - slot) -- up to the last slot
    local v = redis.call('GETRANGE', r.key, W * slot, W * (slot + n) - 1)
    if #v ~= W * n then
      malformed('sliding window', r.key)
    end
    for k = 0, n - 1 do
      out[i + k] = r.base + dec6(v, W * k + 1)
    end
    i = i + n
  end
  return out
end

-- ringAt returns the time of the entry i of the ring r.
local function ringAt(r, i)
  if i == r.first then
    return r.tfirst
  end
  return ringRead(r, i, i)[i]
end

-- ringTrim moves r.first past the entries that have left the window
-- (times at or before cut): usually none, or a few read in one GETRANGE;
-- a binary search beyond those.
local function ringTrim(r, cut)
  if r.first == r.count or r.tfirst > cut then
    return
  end
  if r.newest <= cut then
    r.first, r.tfirst = r.count, r.newest
    return
  end
  -- Entry lo has left the window, entry hi (the newest at first) has not.
  local lo, hi, thi = r.first, r.count - 1, r.newest
  local last = math.min(hi - 1, lo + CHUNK)
  if last > lo then
    local ts = ringRead(r, lo + 1, last)
    for i = lo + 1, last do
      if ts[i] > cut then
        r.first, r.tfirst = i, ts[i]
        return
      end
    end
    lo = last
  end
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    local tm = ringAt(r, mid)
    if tm > cut then
      hi, thi = mid, tm
    else
      lo = mid
    end
  end
  r.first, r.tfirst = hi, thi
end

-- Each check returns allowed, remaining, reset_after, retry_after, the
-- value that write needs to record the hit (nil when it is not to be
-- recorded), the epoch of the state it found (nil if none), and whether
-- recording the hit fills the state to its bound (an overdraw hit's). An
-- overdraw hit past its limit is answered as the key stands with it
-- recorded: a denial of cost 1. Checks write nothing.

-- sliding checks a sliding-window hit; its value is the ring it read,
-- trimmed (nil for a new one).
local function sliding(key, cost, limit, window, over)
  local r = ringOpen(key)
  local live = 0
  if r ~= nil then
    ringTrim(r, now - window)
    live = r.count - r.first
  end
  if live + cost <= limit then
    return true, limit - live - cost, window, 0, r, r and r.ep
  end
  if over then
    -- The live entries, then cost entries at t: the one at index live +
    -- cost - limit frees room for a request of cost 1. Entries past the
    -- bound are the oldest, which leave first and decide nothing.
    local t, frees, i = now, now, live + cost - limit
    if r ~= nil then
      t = math.max(now, r.newest)
      frees = t
      if i < live then
        frees = ringAt(r, r.first + i)
      end
    end
    local LOGDEBT = math.min(limit, 100)
    local held = math.min(live + cost, limit + LOGDEBT)
    return false, limit - held, t + window - now, frees + window - now, r, r and r.ep, held < live + cost
  end
  -- The entry whose leaving frees room for cost: live + cost > limit puts
  -- it at or after first.
  local frees = ringAt(r, r.count + cost - limit - 1)
  return false, limit - live, r.newest + window - now, frees + window - now, nil, r.ep
end

-- ringRewrite writes the ring r whole, keeping its live entries (first to
-- count - 1) and appending cost entries at t: head 0, first 0. It rebases
-- the ring when it keeps nothing (base t), or when t would not fit the
-- base (base the oldest live entry's time, every live entry decoded and
-- encoded again); otherwise it copies the live entries as they are.
local function ringRewrite(r, cost, t, window)
  local parts = {}
  local live = r.count - r.first
  if live == 0 then
    r.base, r.tfirst = t, t
  elseif t - r.base >= SPAN then
    if t - r.tfirst >= SPAN then
      -- Only a window longer than SPAN keeps such an entry.
      error('redisstore: sliding window ' .. r.key .. ': an entry in the window is 2^48 us (8.9 years) old, ' ..
        'beyond what the ring holds')
    end
    local ts = ringRead(r, r.first, r.count - 1)
    for i = r.first, r.count - 1 do
      parts[#parts + 1] = enc6(ts[i] - r.tfirst)
    end
    r.base = r.tfirst
  else
    local slot = (r.head + r.first) % r.count
    local n = math.min(live, r.count - slot)
    parts[1] = redis.call('GETRANGE', r.key, W * slot, W * (slot + n) - 1)
    if n < live then
      parts[2] = redis.call('GETRANGE', r.key, 0, W * (live - n) - 1)
    end
  end
  r.count, r.head, r.first, r.newest = live + cost, 0, 0, t
  parts[#parts + 1] = packTail(cost, t, r.ep, 0, r.count, 0, r.base, r.tfirst, t)
  local s = table.concat(parts)
  if #s ~= W * r.count + HDR then
    malformed('sliding window', r.key)
  end
  local px = ttl(t + window)
  redis.call('PEXPIRE', r.key, px) -- first: see Writes
  redis.call('SET', r.key, s, 'PX', px)
end

-- recordSliding records cost requests in the ring r of key, as its check
-- read it (nil: none; epoch is then the new ring's), at t = max(now, its
-- newest time): a clock that stepped back keeps the order. Past the limit
-- (over), it keeps the newest limit + LOGDEBT entries, written whole;
-- full: the ring then takes the epoch after its own.
local function recordSliding(key, cost, limit, window, epoch, r, over, full)
  if r == nil then
    r = {key = key, ep = tonumber(epoch), head = 0, count = 0, first = 0, base = now, tfirst = now, newest = now}
    if not over then
      local px = ttl(now + window)
      redis.call('PEXPIRE', key, px) -- first: see Writes
      redis.call('SET', key, packTail(cost, now, r.ep, 0, cost, 0, now, now, now), 'PX', px)
      return
    end
  end
  local t = math.max(now, r.newest)
  if over then
    local LOGDEBT = math.min(limit, 100)
    local drop = math.max(0, r.count - r.first + cost - limit - LOGDEBT)
    if drop > 0 then
      if r.first + drop < r.count then
        r.tfirst = ringAt(r, r.first + drop)
      end
      r.first = math.min(r.count, r.first + drop)
    end
    if full then
      r.ep = r.ep % (2 ^ 48 - 1) + 1
    end
    ringRewrite(r, math.min(cost, limit + LOGDEBT), t, window)
    return
  end
  local head, count = r.head, r.count
  if r.first == count or count > limit or (count < limit and (head ~= 0 or count + cost >= limit)) or
      t - r.base >= SPAN then
    -- Every entry has left the window, or the limit changed since the
    -- ring filled, or it fills up now, or t does not fit the base.
    ringRewrite(r, cost, t, window)
    return
  end
  redis.call('PEXPIRE', key, ttl(t + window)) -- first: see Writes
  if count < limit then
    -- Not full (head is 0), and stays so: append, the header after the new entries.
    redis.call('SETRANGE', key, W * count, packTail(cost, t, r.ep, 0, count + cost, r.first, r.base, r.tfirst, t))
    return
  end
  -- Full: overwrite the cost oldest, which have left the window (live +
  -- cost <= limit = count), wrapping.
  local n = math.min(cost, count - head)
  head = (head + cost) % count
  if n == cost and head == 0 then
    -- The last slots: the header follows them.
    redis.call('SETRANGE', key, W * r.head, packTail(n, t, r.ep, 0, count, r.first - cost, r.base, r.tfirst, t))
    return
  end
  local entry = enc6(t - r.base)
  redis.call('SETRANGE', key, W * r.head, string.rep(entry, n))
  if cost > n then
    redis.call('SETRANGE', key, 0, string.rep(entry, cost - n))
  end
  redis.call('SETRANGE', key, W * count, packHeader(r.ep, head, count, r.first - cost, r.base, r.tfirst, t))
end

-- Fast path: a call of one Take of one sliding-window hit, not overdraw,
-- the common case at light load, decided before the other functions are
-- built, which would cost it about 2us of 10 (BENCHMARKS.md).
if #ARGV == 2 and #KEYS == 1 and ARGV[1] ~= '0' then
  local alg, cost, limit, window, over = figures(ARGV[2])
  if alg == 's' and not over then
    local ok, remaining, reset, retry, r, ep = sliding(KEYS[1], cost, limit, window, false)
    ep = ep or tonumber(ARGV[1])
    if ok then
      recordSliding(KEYS[1], cost, limit, window, ep, r)
    end
    return {now, ok and 1 or 0, remaining, reset, retry, ok and ep or 0}
  end
end

-- bucket checks a token-bucket hit (GCRA).
local function bucket(key, cost, capacity, interval, over)
  local tat = now
  local ep = nil
  local stored = redis.call('GET', key)
  if stored then
    local v, e = string.match(stored, '^(%d+):(%d+)$')
    if v == nil then
      malformed('token bucket', key)
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
  if not over then
    return false, floordiv(full - (tat - now), interval), tat - now, new - now - full, nil, ep
  end
  -- Past the limit: the TAT moves on by cost * interval, up to AHEAD past
  -- a full bucket's, never back. (A product past 2^53 is inexact, but
  -- then past the bound as well.)
  local AHEAD = math.min(full, 315360000000000)
  local bound = now + full + AHEAD
  local filled = new > bound
  if filled then
    new = math.max(tat, bound)
  end
  return false, floordiv(full - (new - now), interval), new - now, new + interval - now - full, new, ep, filled
end

-- fixed checks a fixed-window hit.
local function fixed(key, cost, limit, window, over)
  local idx = floordiv(now, window)
  local count = 0
  local ep = nil
  local stored = redis.call('GET', key)
  if stored then
    local si, sc, e = string.match(stored, '^(%d+):(%d+):(%d+)$')
    if si == nil then
      malformed('fixed window', key)
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
  if not over then
    return false, limit - count, left, left, nil, ep
  end
  local MAXCOUNT = 2 * limit
  local n = count + cost -- past the limit: up to MAXCOUNT, never down
  local filled = n > MAXCOUNT
  if filled then
    n = math.max(count, MAXCOUNT)
  end
  return false, limit - n, left, left, fmt(idx) .. ':' .. fmt(n), ep, filled
end

-- counter checks a sliding-window counter's hit. With t into the current
-- window, a request is admitted iff prev * (window - t) / window + cur +
-- cost <= limit, all in exact integers ((limit+1) * window < 2^53).
-- memstore computes the same formulas in nanoseconds.
local function counter(key, cost, limit, window, over)
  local idx = floordiv(now, window)
  local t = now - idx * window
  local prev, cur = 0, 0
  local ep = nil
  local stored = redis.call('GET', key)
  if stored then
    local si, sp, sc, e = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
    if si == nil then
      malformed('sliding-window counter', key)
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
    return true, limit - w - cur - cost, 2 * window - t, 0, fmt(idx) .. ':' .. fmt(prev) .. ':' .. fmt(cur + cost), ep
  end
  local val, filled
  if over then
    -- Past the limit: the current count takes cost, up to twice the
    -- limit and the count c with (c + 1) * window at most 2^53, never
    -- down; the figures are a request of cost 1's against it.
    local most, c = math.min(2 * limit, floordiv(2 ^ 53, window) - 1), cur + cost
    filled = c > most
    if filled then
      c = math.max(cur, most)
    end
    cur, cost = c, 1
    val = fmt(idx) .. ':' .. fmt(prev) .. ':' .. fmt(cur)
  end
  local reset = 0
  if cur > 0 then
    reset = 2 * window - t
  elseif prev > 0 then
    reset = window - t
  end
  local remaining = limit - w - cur
  local r = limit - cur - cost
  if r >= 0 then
    -- This window admits it once prev * (window - t) / window <= r.
    local at = window - floordiv(r * window, prev)
    if at < window then
      return false, remaining, reset, at - t, val, ep, filled
    end
  end
  -- The next window, where cur is the previous count, admits it once
  -- cur * (window - t) / window <= limit - cost.
  local at = 0
  if cur > 0 then
    at = math.max(0, window - floordiv((limit - cost) * window, cur))
  end
  return false, remaining, reset, window - t + at, val, ep, filled
end

local checks = {s = sliding, t = bucket, f = fixed, c = counter}

-- write records a hit that its check allowed (ok), or an overdraw hit
-- past its limit: val, left and full are what its check returned, ep the
-- epoch of its state.
local function write(key, alg, cost, limit, window, ok, val, left, ep, full)
  if alg == 's' then
    recordSliding(key, cost, limit, window, ep, val, not ok, full)
    return
  end
  if full then
    ep = fmt(tonumber(ep) % (2 ^ 48 - 1) + 1)
  end
  if alg == 't' then
    redis.call('SET', key, fmt(val) .. ':' .. ep, 'PX', ttl(val)) -- val: the new TAT
  else
    redis.call('SET', key, val .. ':' .. ep, 'PX', ttl(now + left)) -- left: until the state's end
  end
end

-- The hits' figures, parsed once per distinct string (a batch repeats its
-- rules'), and the shape of the call, checked before anything is written.
local parsed, nargs, nhits = {}, #ARGV, 0
for a = 1, nargs do
  local s = ARGV[a]
  if (string.byte(s) or 0) > 57 then -- figures: a letter
    if a == 1 then
      error('redisstore: take: the arguments start with figures, not an epoch')
    end
    nhits = nhits + 1
    if parsed[s] == nil then
      parsed[s] = {figures(s)}
    end
  elseif tonumber(s) == nil or a == nargs or (string.byte(ARGV[a + 1]) or 0) <= 57 then
    error('redisstore: take: argument ' .. a .. ': want an epoch followed by figures')
  end
end
if nhits ~= #KEYS then
  error('redisstore: take: ' .. #KEYS .. ' keys and ' .. nhits .. ' hits')
end

-- Every group, hit by hit in KEYS order: out[1] is the time, and hit h's
-- five values are out[5 * h - 3] to out[5 * h + 1]. A group records when
-- each of its hits is allowed or overdraw; a group of one at once, the
-- hits of a larger one once all are checked (oks to fulls hold them).
local out, a, h = {now}, 1, 0
local oks, vals, lefts, eps, fulls
while a <= nargs do
  local epoch = ARGV[a]
  local record, first, all = epoch ~= '0', h + 1, true
  a = a + 1
  local n = 0
  while a + n <= nargs and string.byte(ARGV[a + n]) > 57 do
    n = n + 1
  end
  if n > 1 and oks == nil then
    oks, vals, lefts, eps, fulls = {}, {}, {}, {}, {}
  end
  for i = a, a + n - 1 do
    h = h + 1
    local f = parsed[ARGV[i]]
    local alg, cost, limit, window, over = f[1], f[2], f[3], f[4], f[5]
    local check = checks[alg]
    if check == nil then
      error('redisstore: unknown algorithm ' .. tostring(alg))
    end
    local ok, remaining, reset, retry, val, ep, full = check(KEYS[h], cost, limit, window, over)
    ep = ep or epoch
    local o = 5 * h - 4
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok and 1 or 0, remaining, reset, retry, 0
    if n == 1 then
      if (ok or over) and record then
        write(KEYS[h], alg, cost, limit, window, ok, val, reset, ep, full)
        out[o + 5] = tonumber(ep)
      end
    else
      all = all and (ok or over)
      oks[h], vals[h], lefts[h], eps[h], fulls[h] = ok, val, reset, ep, full
    end
  end
  if n > 1 and record and all then
    for i = first, h do
      local f = parsed[ARGV[a + i - first]]
      write(KEYS[i], f[1], f[2], f[3], f[4], oks[i], vals[i], lefts[i], eps[i], fulls[i])
      out[5 * i + 1] = tonumber(eps[i])
    end
  end
  a = a + n
end
return out
