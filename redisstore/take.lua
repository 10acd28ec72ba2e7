-- take.lua: check groups of rate-limit hits and record each group whose
-- hits are within their limits (overdraw hits aside). A call carries one
-- or more groups (a floodgate Take each, or one Peek), each all-or-nothing;
-- a later group sees what an earlier one recorded. ring.lua comes first.
--
-- KEYS: one state key per hit, in the order of the hits over all groups,
-- <prefix>{<rule>:<key>}:<letter>:<window>, each named once a group:
--   w  sliding window          the ring of admitted times (ring.lua); h for leases
--   t  token bucket            "<TAT>:<epoch>", the theoretical arrival time
--   f  fixed window            "<window index>:<count>:<epoch>"
--   c  sliding-window counter  "<window index>:<previous count>:<count>:<epoch>"
-- The take that creates a state writes its group's epoch, later takes keep
-- it, and a refund credits only a state of its take's epoch (refund.lua).
-- ARGV: the groups one after another, each its epoch (a number), then its
-- hits (each starts with a letter), 5 values each or "=" for the 5 of the
-- hit before, then, for a lease, "L<us>":
--   epoch     of a state this group creates, 1 to 2^48 - 1; "0" for a Peek
--   alg       "s" sliding window, "t" token bucket, "f" fixed window, "c"
--             sliding-window counter
--   cost      1..capacity (an overdraw hit's up to 2^51, a ring's up to 100)
--   limit     the limit L; "t": the capacity B
--   window    the window W in us; "t": the emission interval T, ceil(W / L)
--   overdraw  "1": recorded whenever the group's other hits are, even past
--             its limit, the key owing the excess; "0": only within it
--   L<us>     after a group of one hit, a lease (floodgate.Hit.Lease):
--             checked at now, recorded (ring, bucket) as at rec = now + us,
--             its figures the key's so recorded; a fixed window or counter
--             records it at now, the Go side cutting it at the window's end.
--             Each lease of a batch is decided as a call of its own would be.
-- Reply: the server time in us, then per hit in KEYS order: allowed (1 or
-- 0; a hit of a denied group may be 1, within its own limit), remaining
-- (negative in debt), reset_after and retry_after in us (0 when allowed),
-- and the epoch of the state that recorded it (0 if none). An overdraw hit
-- past its limit reports 0 and the key as it stands with it; one that
-- carried its state past its bound reports the epoch before, and the state
-- takes the next, so no refund credits it. Requires Redis 5.0 (ring.lua).
--
-- Bounds past the limit, internal/algo's (memstore's), each a local where
-- it is used (an upvalue costs every call): a fixed window counts up to
-- MAXCOUNT, a counter up to twice its limit and (c + 1) * window <= 2^53,
-- a TAT runs up to AHEAD past a full bucket's, a ring keeps LOGDEBT
-- entries past its limit; a hit past its bound fills the state, which
-- takes the epoch ep % (2^48 - 1) + 1. Writes: a ring's start with
-- PEXPIRE, which cannot grow memory, so that Redis at maxmemory
-- (noeviction) lets the rest through and keeps enforcing the limits.

-- The sliding window. A take reads the header (GETRANGE of the last 34
-- bytes), and entries only to move first past those that left the window
-- (one GETRANGE of up to CHUNK, a binary search beyond). It appends or
-- overwrites the oldest slots with one SETRANGE of the entries and the
-- header where they touch, and writes the ring whole (SET, the live entries
-- only) when it is created, fills up, has nothing live, after a limit
-- change, to rebase it, and past the limit (head 0). A cost n is admitted
-- exactly when at most limit - n entries are live. SPAN bounds an offset
-- from base; TAIL packs an entry and a header; the header's range is sent
-- as strings (Redis formats a number with snprintf('%.17g')).
local SPAN, CHUNK, HDRFROM, HDRTO, TAIL = 2 ^ 48, 8, '-34', '-1', '<I6' .. HEADER

local nargs, rec = #ARGV, now -- rec: when the group's hits are recorded (a lease's end)

-- leaseAt returns, for the argument a after a group's hits, when the group
-- is recorded (rec) and where the next group starts: now + us and a + 1
-- after "L<us>" (76 is "L"), now and a without.
local function leaseAt(a)
  local us = string.byte(ARGV[a] or '') == 76 and tonumber(string.sub(ARGV[a], 2))
  if us == false then
    return now, a
  elseif us == nil or us <= 0 then
    error('redisstore: take: argument ' .. a .. ': want a lease "L<us>"')
  end
  return now + us, a + 1
end

-- ringRead returns the times of the entries i to j (0 the oldest; j - i <
-- count) of the ring of key, in a table indexed from i, with at most two
-- GETRANGEs (one unless they wrap).
local function ringRead(key, head, count, base, i, j)
  local out = {}
  while i <= j do
    local slot = (head + i) % count
    local n = math.min(j - i + 1, count - slot) -- up to the last slot
    local v = redis.call('GETRANGE', key, W * slot, W * (slot + n) - 1)
    if #v ~= W * n then
      error('redisstore: sliding window ' .. key .. ': malformed state')
    end
    for k = 0, n - 1 do
      out[i + k] = base + unpack('<I6', v, W * k + 1)
    end
    i = i + n
  end
  return out
end

-- ringAt returns the time of the entry i of the ring of key.
local function ringAt(key, head, count, base, first, tfirst, i)
  return i == first and tfirst or ringRead(key, head, count, base, i, i)[i]
end

-- sliding checks a sliding-window hit and, if record, records it when
-- allowed or over, at t = max(rec, the newest time) (a clock that stepped
-- back, or a lease, keeps the order). h is the header if read already, and the check's
-- value: a group of several hits records each with a second call. Past
-- the limit it keeps the newest limit + LOGDEBT entries; when that drops
-- some (full), the ring takes the next epoch.
local function sliding(key, cost, limit, window, over, epoch, record, h)
  h = h or redis.call('GETRANGE', key, HDRFROM, HDRTO)
  local ep, head, count, first, base, tfirst, newest = nil, 0, 0, 0, now, now, now
  local cut = now - window
  if h == '' then
    ep = tonumber(epoch) -- a new ring's
  else
    if #h == HDR then
      ep, head, count, first, base, tfirst, newest = unpack(HEADER, h, 1)
      tfirst, newest = base + tfirst, base + newest
    end
    if #h ~= HDR or count == 0 or head >= count or first > count then
      error('redisstore: sliding window ' .. key .. ': malformed state')
    end
    -- Move first past the entries that left the window (at or before cut).
    if first == count or tfirst > cut then
      -- none
    elseif newest <= cut then
      first, tfirst = count, newest
    else
      -- Entry lo has left the window, entry hi (the newest at first) has not.
      local lo, hi, thi = first, count - 1, newest
      local last = math.min(hi - 1, lo + CHUNK)
      if last > lo then
        local ts = ringRead(key, head, count, base, lo + 1, last)
        for i = lo + 1, last do
          if ts[i] > cut then
            hi, thi = i, ts[i]
            break
          end
        end
        lo = math.min(last, hi - 1)
      end
      while hi - lo > 1 do
        local mid = math.floor((lo + hi) / 2)
        local tm = ringAt(key, head, count, base, first, tfirst, mid)
        if tm > cut then
          hi, thi = mid, tm
        else
          lo = mid
        end
      end
      first, tfirst = hi, thi
    end
  end
  local live, t, full, LOGDEBT = count - first, math.max(rec, newest), false, math.min(limit, 100)
  local allowed, remaining, reset, retry = live + cost <= limit, limit - live - cost, t + window - now, 0
  if not allowed and not over then
    -- The entry whose leaving frees room for cost: live + cost > limit
    -- puts it at or after first.
    local frees = ringAt(key, head, count, base, first, tfirst, count + cost - limit - 1)
    return false, limit - live, newest + window - now, frees + window - now, h, ep
  elseif not allowed then
    -- Live entries, then cost at t: the one at live + cost - limit frees
    -- room for a cost of 1. Those past the bound are the oldest.
    local i = live + cost - limit
    local frees = i < live and ringAt(key, head, count, base, first, tfirst, first + i) or t
    local held = math.min(live + cost, limit + LOGDEBT)
    full, remaining, reset, retry = held < live + cost, limit - held, t + window - now, frees + window - now
  end
  if not record then
    return allowed, remaining, reset, retry, h, ep, full
  end
  local reply = ep
  if over and not allowed then
    local drop = math.max(0, live + cost - limit - LOGDEBT)
    if drop > 0 then
      if first + drop < count then
        tfirst = ringAt(key, head, count, base, first, tfirst, first + drop)
      end
      first = math.min(count, first + drop)
    end
    ep = full and ep % (2 ^ 48 - 1) + 1 or ep
    cost, live = math.min(cost, limit + LOGDEBT), count - first
  elseif not (first == count or count > limit or (count < limit and (head ~= 0 or count + cost >= limit)) or
      t - base >= SPAN) then
    -- Append (not full, head 0, and stays so) or, full, overwrite the cost
    -- oldest (left the window: live + cost <= limit = count), from slot at.
    local at, nhead, ncount, nfirst = head, (head + cost) % count, count, first - cost
    if count < limit then
      at, nhead, ncount, nfirst = count, 0, count + cost, first
    end
    redis.call('PEXPIRE', key, ttl(t + window)) -- first: see Writes
    if at + cost == ncount then
      -- The header follows the new entries (one pack for cost 1).
      local s
      if cost == 1 then
        s = pack(TAIL, t - base, ep, nhead, ncount, nfirst, base, tfirst - base, t - base)
      else
        s = pack('<I6', t - base):rep(cost) .. pack(HEADER, ep, nhead, ncount, nfirst, base, tfirst - base, t - base)
      end
      redis.call('SETRANGE', key, W * at, s)
    else
      local n, entry = math.min(cost, count - head), pack('<I6', t - base)
      redis.call('SETRANGE', key, W * head, entry:rep(n))
      if cost > n then
        redis.call('SETRANGE', key, 0, entry:rep(cost - n))
      end
      redis.call('SETRANGE', key, W * count, pack(HEADER, ep, nhead, count, nfirst, base, tfirst - base, t - base))
    end
    return allowed, remaining, reset, retry, h, reply
  end
  -- Write it whole: the live entries, then cost at t; head 0, first 0,
  -- rebased when it keeps nothing (base t) or t does not fit the base
  -- (base the oldest live time, every entry encoded again).
  local parts = {}
  if live == 0 then
    base, tfirst = t, t
  elseif t - base >= SPAN then
    if t - tfirst >= SPAN then
      -- Only a window longer than SPAN keeps such an entry.
      error('redisstore: sliding window ' .. key .. ': an entry in the window is 2^48 us (8.9 years) old, ' ..
        'beyond what the ring holds')
    end
    local ts = ringRead(key, head, count, base, first, count - 1)
    for i = first, count - 1 do
      parts[#parts + 1] = pack('<I6', ts[i] - tfirst)
    end
    base = tfirst
  else
    local slot = (head + first) % count
    local n = math.min(live, count - slot)
    parts[1] = redis.call('GETRANGE', key, W * slot, W * (slot + n) - 1)
    if n < live then
      parts[2] = redis.call('GETRANGE', key, 0, W * (live - n) - 1)
    end
  end
  parts[#parts + 1] = pack('<I6', t - base):rep(cost) ..
    pack(HEADER, ep, 0, live + cost, 0, base, tfirst - base, t - base)
  local s = table.concat(parts)
  if #s ~= W * (live + cost) + HDR then
    error('redisstore: sliding window ' .. key .. ': malformed state')
  end
  local px = ttl(t + window)
  redis.call('PEXPIRE', key, px) -- first: see Writes
  redis.call('SET', key, s, 'PX', px)
  return allowed, remaining, reset, retry, h, reply
end

-- Fast path: Takes of one sliding-window hit each (alone, or the group
-- commit's batch), decided before the other functions are built, each of
-- which costs a call about 1.5k Redis instructions (BENCHMARKS.md).
if nargs == 6 and ARGV[2] == 's' and ARGV[1] ~= '0' and #KEYS == 1 then
  local over = ARGV[6] == '1'
  local ok, remaining, reset, retry, _, ep = sliding(KEYS[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
    over, ARGV[1], true)
  return {now, ok and 1 or 0, remaining, reset, retry, (ok or over) and ep or 0}
end
local fast, a, n, _ = true, 1, 0, nil
while fast and a < nargs do
  local v = ARGV[a + 1]
  fast = ARGV[a] ~= '0' and string.byte(ARGV[a]) <= 57 and (v == 's' or v == '=' and n > 0)
  _, a = leaseAt(a + (v == '=' and 2 or 6))
  n = n + 1
end
if fast and a == nargs + 1 and n == #KEYS then
  local out, cost, limit, window, over = {now}
  a = 1
  for h = 1, n do
    local epoch = ARGV[a]
    if ARGV[a + 1] == '=' then
      a = a + 2
    else
      cost, limit, window = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
      over = ARGV[a + 5] == '1'
      a = a + 6
    end
    rec, a = leaseAt(a)
    local ok, remaining, reset, retry, _, ep = sliding(KEYS[h], cost, limit, window, over, epoch, true)
    local o = 5 * h - 4
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok and 1 or 0, remaining, reset, retry,
      (ok or over) and ep or 0
  end
  return out
end

-- bucket checks a token-bucket hit (GCRA).
local function bucket(key, cost, capacity, interval, over)
  local tat, ep = now, nil
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
    -- A lease conforms now and is recorded as taken at rec.
    local at = math.max(tat, rec) + cost * interval
    return true, math.max(0, floordiv(full - (at - now), interval)), at - now, 0, at, ep
  end
  if not over then
    return false, floordiv(full - (tat - now), interval), tat - now, new - now - full, nil, ep
  end
  -- Past the limit: the TAT moves on by cost * interval, up to AHEAD past a
  -- full bucket's, never back (a product past 2^53, inexact, is past it).
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
  local count, ep = 0, nil
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
  if not over then
    return false, limit - count, left, left, nil, ep
  end
  local MAXCOUNT, n = 2 * limit, count + cost -- past the limit: up to MAXCOUNT, never down
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
  local prev, cur, ep = 0, 0, nil
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
  local w = -floordiv(-prev * (window - t), window) -- the previous window's weight, rounded up
  if w + cur + cost <= limit then
    -- Full again when the window after this one starts; the state lives as long.
    return true, limit - w - cur - cost, 2 * window - t, 0, fmt(idx) .. ':' .. fmt(prev) .. ':' .. fmt(cur + cost), ep
  end
  local val, filled
  if over then
    -- Past the limit: the count takes cost, up to its bound, never down;
    -- the figures are a request of cost 1's against it.
    local most, c = math.min(2 * limit, floordiv(2 ^ 53, window) - 1), cur + cost
    filled = c > most
    if filled then
      c = math.max(cur, most)
    end
    cur, cost = c, 1
    val = fmt(idx) .. ':' .. fmt(prev) .. ':' .. fmt(cur)
  end
  local reset = cur > 0 and 2 * window - t or prev > 0 and window - t or 0
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

-- write records a hit its check allowed (ok), or an overdraw hit past its
-- limit: val, left and full as its check returned, ep its state's epoch.
local function write(key, alg, cost, limit, window, over, epoch, ok, val, left, ep, full)
  if alg == 's' then
    sliding(key, cost, limit, window, over, epoch, true, val)
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

-- The shape of the call, checked before anything is written: each
-- group's epoch, then sizes[g] hits, then "L<us>" if a lease (recs[g]).
local sizes, recs, nhits, a = {}, {}, 0, 1
while a <= nargs do
  if tonumber(ARGV[a]) == nil or (string.byte(ARGV[a + 1] or '') or 0) <= 57 then
    error('redisstore: take: argument ' .. a .. ': want an epoch and then hits')
  end
  local n = 0
  a = a + 1
  repeat
    if ARGV[a] == '=' and nhits + n > 0 then
      a = a + 1
    elseif checks[ARGV[a]] ~= nil and a + 4 <= nargs then
      a = a + 5
    else
      error('redisstore: take: argument ' .. a .. ': want a hit, "=" or alg "s", "t", "f" or "c" and 4 values')
    end
    n = n + 1
  until a > nargs or string.byte(ARGV[a]) <= 57 or string.byte(ARGV[a]) == 76
  local at, next = leaseAt(a)
  if next > a and n ~= 1 then
    error('redisstore: take: argument ' .. a .. ': a lease follows a group of one hit')
  end
  sizes[#sizes + 1], nhits, a = n, nhits + n, next
  recs[#sizes] = at
end
if nhits ~= #KEYS then
  error('redisstore: take: ' .. #KEYS .. ' keys and ' .. nhits .. ' hits')
end

-- Every group, hit by hit in KEYS order: out[1] is the time, and hit h's
-- five values are out[5 * h - 3] to out[5 * h + 1]. A group records when
-- each of its hits is allowed or overdraw: a group of one at once, the
-- hits of a larger one once all are checked (hits holds them).
local out, h, hits = {now}, 0, nil
local alg, cost, limit, window, over -- the hit's, or the one before's for "="
a = 1
for g, n in ipairs(sizes) do
  local epoch = ARGV[a]
  local record, first, all = epoch ~= '0', h + 1, true
  a, rec = a + 1, recs[g]
  for _ = 1, n do
    h = h + 1
    if ARGV[a] == '=' then
      a = a + 1
    else
      alg, cost, limit, window, over = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
        ARGV[a + 4] == '1'
      a = a + 5
    end
    local ok, remaining, reset, retry, val, ep, full = checks[alg](KEYS[h], cost, limit, window, over, epoch,
      record and n == 1)
    ep = ep or epoch
    local o = 5 * h - 4
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok and 1 or 0, remaining, reset, retry, 0
    if n == 1 then
      if (ok or over) and record then
        if alg ~= 's' then -- sliding recorded it
          write(KEYS[h], alg, cost, limit, window, over, epoch, ok, val, reset, ep, full)
        end
        out[o + 5] = tonumber(ep)
      end
    else
      all = all and (ok or over)
      hits = hits or {}
      hits[h] = {alg, cost, limit, window, over, epoch, ok, val, reset, ep, full}
    end
  end
  a = rec ~= now and a + 1 or a -- past a lease's "L<us>"
  if n > 1 and record and all then
    for j = first, h do
      write(KEYS[j], tunpack(hits[j], 1, 11))
      out[5 * j + 1] = tonumber(hits[j][10])
    end
  end
end
return out
