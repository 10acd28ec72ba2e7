-- take.lua: check groups of rate-limit hits and record each group whose
-- hits are within their limits (overdraw hits aside: see overdraw below).
-- One call carries one or more independent groups (one group per
-- floodgate Take); a group is all-or-nothing, and a later group sees what
-- an earlier group of the same call recorded.
--
-- KEYS: one state key per hit, in the order of the hits over all groups,
-- <prefix>{<rule>:<key>}:<letter>:<window> (see the package documentation),
-- holding by its letter:
--   w  sliding window  string, a ring of the admitted requests' times in
--                      us (see "The ring" below)
--   t  token bucket    string "<TAT>:<epoch>", the theoretical arrival time
--                      in us
--   f  fixed window    string "<window index>:<count>:<epoch>"
--   c  sliding-window  string "<window index>:<previous count>:<current
--      counter         count>:<epoch>"
-- The epoch names the state: the take that creates a state (the key is
-- absent) writes its group's epoch, and later takes keep it. A refund
-- credits only a state whose epoch is its take's (refund.lua).
-- ARGV (each read once, by these names: see "The arguments" below):
--   mode     "1" records the groups that are allowed (Take), "0" records
--            nothing and writes nothing (Peek), "2" records a batch of
--            lone sliding-window takes of one rule in short form (below)
--   then each group, to the end of ARGV (the groups are not counted: a
--   call of one hit has 8 arguments, and a 9th would cost Redis a larger
--   ARGV table on every call, BENCHMARKS.md):
--     epoch  the epoch of a state this group creates: a positive integer
--            below 2^48 ("0" for a Peek, which creates none)
--     nhits  the number of hits of the group
--     then for each hit, 5 values:
--       alg       "s" sliding window (key letter w), "t" token bucket, "f"
--                 fixed window, "c" sliding-window counter
--       cost      units this hit counts for (1..capacity; an overdraw
--                 hit's up to 2^51, a sliding window's up to 100)
--       limit     "s", "f", "c": the limit L; "t": the capacity B
--       window    "s", "f", "c": the window W in us; "t": the emission
--                 interval T in us, ceil(W / L)
--       overdraw  "1": the hit is recorded whenever the group's other hits
--                 are, even past its limit, and the key owes the excess
--                 (floodgate.Hit.Overdraw, whose table of what each state
--                 holds past its limit this script follows); "0": only
--                 within its limit
-- Mode "3", a lease (floodgate.Hit.Lease): one group of one hit, as mode
-- "1", then the lease in us: the hit is checked at now and recorded as at
-- rec = now + lease (a ring's entries at rec, or at its newest if later; a
-- bucket's TAT from max(TAT, rec)), and its figures are the key's with it
-- so recorded. A fixed window or counter records it as mode "1" does: the
-- Go side cuts the lease at the window's end.
-- Mode "2", the group commit's batch of lone Takes that share a rule and
-- a cost, none overdraw: cost, limit and window once, then one epoch per
-- key, each the group of one hit "<epoch> 1 s <cost> <limit> <window> 0"
-- of mode "1", whose 7 arguments a take cost Redis about 7% of a batched
-- take more than 1 (BENCHMARKS.md).
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
-- Time: redis.call('TIME'), integer microseconds; never a client's clock.
-- Requires Redis 5.0 or later (effects replication of scripts that read TIME
-- before writing).

-- The arguments, into locals named as above: here the call's mode, the
-- first group's epoch and nhits, and its first hit's key, alg, cost,
-- limit, window and overdraw, which are all a call of one hit has (the
-- fast path's); the batch path and the general path read the groups from
-- there.
local mode = ARGV[1]
local epoch, nhits = ARGV[2], tonumber(ARGV[3])
local key, alg, cost, limit, window = KEYS[1], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local overdraw = ARGV[8] == '1'
local record = mode == '1' or mode == '2' or mode == '3'
local alone = mode == '1' and nhits == 1 and ARGV[9] == nil -- one group of one hit

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
-- rec: when this call's hits are recorded (mode "3": the lease's end).
local rec, nargs0 = now, #ARGV
if mode == '3' then
  rec, nargs0 = now + tonumber(ARGV[#ARGV]), #ARGV - 1
end

local char, byte, floor = string.char, string.byte, math.floor

-- TTLs: a state weighs until a time e in us (a ring: its newest entry's
-- time + window, whatever now says, as a take after the clock stepped
-- back is recorded at the newest time; a token bucket: its TAT; a fixed
-- window: the window's end; a counter: the next window's end), and is
-- written with the TTL ceil((e - now) / 1000) ms, at least 1 since
-- e > now. Redis keeps the expiry in ms from the ms of the write (at or
-- after floor(now / 1000), now being TIME's) and keeps the key through
-- its last ms, so the key outlives every us before e. A TTL is always
-- computed from e, never read back with PTTL: Redis reports PTTL 0 during
-- a key's whole last ms, while its state may still weigh (refund.lua,
-- issue 25).
-- ttl returns that TTL, formatted, and keeps it for the next state, which
-- usually shares e (now + window for a ring, the window's end for a fixed
-- window or counter). Its ceiling is exact: (e - now) / 1000 is correctly
-- rounded, and e - now, at most two windows (20 years) plus how far the
-- clock stepped back, stays below 2^43 ms (278 years), where a quotient
-- that is not an integer never rounds to one.
local ttl
do
  local lastE, lastTTL
  ttl = function(e)
    if e ~= lastE then
      lastE, lastTTL = e, string.format('%.0f', math.ceil((e - now) / 1000))
    end
    return lastTTL
  end
end

-- Fixed-width little-endian integers (0 to 2^53): Redis's struct library
-- where there is one (a C call per header or entry), plain Lua elsewhere
-- (miniredis, which the demo embeds, has no struct library; a test runs
-- both on Redis and compares their bytes, TestRingEncodersAgree).
-- enc6 and dec6 encode and decode an entry, a time as its offset from the
-- ring's base (6 bytes); packHeader and headerFields the ring's header (34
-- bytes: see "The ring" below), whose tfirst and newest they take and give
-- as times; packTail n entries at the time t, then a header (what an append
-- writes), in one string.
local enc6, dec6, packHeader, headerFields, packTail
local struct = rawget(_G, 'struct')
if struct then
  local pack, unpack = struct.pack, struct.unpack
  enc6 = function(x)
    return pack('<I6', x)
  end
  dec6 = function(s, i)
    return (unpack('<I6', s, i))
  end
  packHeader = function(ep, head, count, first, base, tfirst, newest)
    return pack('<I6I3I3I3I7I6I6', ep, head, count, first, base, tfirst - base, newest - base)
  end
  packTail = function(n, t, ep, head, count, first, base, tfirst, newest)
    if n == 1 then
      -- One pack: no entry string to repeat and join (callgrind, BENCHMARKS.md).
      return pack('<I6I6I3I3I3I7I6I6', t - base, ep, head, count, first, base, tfirst - base, newest - base)
    end
    return string.rep(pack('<I6', t - base), n) .. pack('<I6I3I3I3I7I6I6', ep, head, count, first, base,
      tfirst - base, newest - base)
  end
  headerFields = function(s, i)
    local ep, head, count, first, base, tfirst, newest = unpack('<I6I3I3I3I7I6I6', s, i)
    return ep, head, count, first, base, base + tfirst, base + newest
  end
else
  local function enc(x, n)
    local b = {}
    for j = 1, n do
      local r = x % 256
      b[j] = r
      x = (x - r) / 256
    end
    return char(unpack(b))
  end
  local function dec(s, i, n)
    local v = 0
    for j = i + n - 1, i, -1 do
      v = v * 256 + byte(s, j)
    end
    return v
  end
  enc6 = function(x)
    return enc(x, 6)
  end
  dec6 = function(s, i)
    return dec(s, i, 6)
  end
  packHeader = function(ep, head, count, first, base, tfirst, newest)
    return enc(ep, 6) .. enc(head, 3) .. enc(count, 3) .. enc(first, 3) .. enc(base, 7) ..
      enc(tfirst - base, 6) .. enc(newest - base, 6)
  end
  headerFields = function(s, i)
    local base = dec(s, i + 15, 7)
    return dec(s, i, 6), dec(s, i + 6, 3), dec(s, i + 9, 3), dec(s, i + 12, 3), base,
      base + dec(s, i + 22, 6), base + dec(s, i + 28, 6)
  end
  packTail = function(n, t, ep, head, count, first, base, tfirst, newest)
    return string.rep(enc(t - base, 6), n) .. packHeader(ep, head, count, first, base, tfirst, newest)
  end
end

-- The ring: the sliding-window log is a ring of the admitted requests'
-- times (see the package documentation), the string "<entries><header>":
--   entries  count slots of 6 bytes, each a time as its offset in µs
--            from base, little-endian, in admission order from the slot
--            head (the oldest), wrapping once count is the limit (until
--            then head is 0)
--   header   34 bytes, little-endian: epoch (6), head (3), count (3),
--            first (3), base (7), tfirst (6), newest (6)
-- first is the index (0 the oldest) of the oldest entry that was still in
-- the window at the last write: the entries before it have left the window
-- for good, as a sorted set's trimmed members have. tfirst is that entry's
-- time (the newest's when first is count), newest the newest entry's, both
-- as offsets from base, like the entries.
-- base is a time in µs at or before every entry's: the ring's creation's,
-- or that of its oldest live entry when it was last rebased. Offsets stay
-- below SPAN (2^48 µs, 8.9 years): a write whose time would not fit
-- rewrites the ring whole, with the time of its oldest live entry as the
-- new base (ringRewrite). That fits whenever the window is at most SPAN;
-- a longer window (Rule allows ten years) whose ring keeps an entry 8.9
-- years old fails the take with an error rather than miscount.
-- A key never needs more than its last limit admitted times: a request of
-- cost n is admitted exactly when the live entries (first to count - 1,
-- once first has moved past those that left the window since) number at
-- most limit - n, and admitting it overwrites n entries that left the
-- window (the oldest) or appends. Times never decrease along the ring.
-- An overdraw hit past the limit keeps more: the live entries and its
-- own, up to limit + LOGDEBT (recordSliding), so that Remaining tells the
-- debt and a refund of a take leaves the entries before it; such a ring
-- (count above the limit, head 0) is written whole until a take admitted
-- within the limit writes it back to its live entries.
--
-- Every take reads the header alone (GETRANGE of the last 34 bytes), and
-- reads entries only to move first past entries that have just left the
-- window: usually none or one, read in one GETRANGE of a few slots. A
-- write sets the TTL first (PEXPIRE: see oomFirst); then an append writes
-- its entries and the header, which follows them, in one SETRANGE, and an
-- overwrite the slots and the header.
-- The string is written whole (SET, with the TTL) when it is created, when
-- it becomes full (so that Redis allocates it exactly), when every entry
-- has left the window (it shrinks to the new ones), when the limit
-- changed, and past the limit. (Reading and writing small rings whole,
-- one GETRANGE and one SET, was measured and cost Redis more per take
-- than this, even at 4 entries: the SET of a new value costs more than a
-- SETRANGE and a PEXPIRE.)
-- W and HDR are the widths of an entry and of the header; SPAN bounds an
-- entry's offset from base; CHUNK is how many entries one read brings when
-- first must move.
local W, HDR, SPAN, CHUNK = 6, 34, 2 ^ 48, 8
-- The header's range, -HDR to -1, as strings: Redis formats a number
-- passed to redis.call with snprintf('%.17g'), which cost a take more than
-- the rest of its GETRANGE (callgrind, BENCHMARKS.md).
local HDRFROM, HDRTO = '-34', '-1'

-- oomFirst: every write of a ring starts with PEXPIRE, a write that
-- cannot grow memory. Redis at maxmemory (noeviction) refuses a script's
-- first write only if it may grow memory (SET, SETRANGE), so the writes
-- after it go through, as the sorted set's did after ZREMRANGEBYSCORE: a
-- full Redis keeps enforcing the limits (docs/RELIABILITY.md).

-- quick decides a sliding-window hit of a group of one, and records it
-- when allowed, in the common cases: the ring is absent; or first needs to
-- move by at most 8 entries (read in one GETRANGE), and then the hit is
-- denied, or appended to a ring that stays below its limit, or overwrites
-- the oldest slots of a full ring without wrapping. It writes a PEXPIRE,
-- then one SET or one or two SETRANGEs. It returns allowed (true or
-- false), remaining, reset_after, retry_after and the ring's epoch; or nil
-- and the header it read, for the general path to take over.
local function quick(key, cost, limit, window, epoch)
  local h = redis.call('GETRANGE', key, HDRFROM, HDRTO)
  if h == '' then
    epoch = tonumber(epoch)
    local px = ttl(now + window)
    redis.call('PEXPIRE', key, px) -- first: see oomFirst
    redis.call('SET', key, string.rep(enc6(0), cost) .. packHeader(epoch, 0, cost, 0, now, now, now), 'PX', px)
    return true, limit - cost, window, 0, epoch
  end
  if #h ~= HDR then
    return nil, h
  end
  local ep, head, count, first, base, tfirst, newest = headerFields(h, 1)
  if count == 0 or head >= count or first >= count then
    return nil, h -- all gone (or malformed): the general path
  end
  local cut = now - window
  if tfirst <= cut then
    -- Read up to 8 entries after first, up to the ring's last slot.
    local slot = (head + first + 1) % count
    local n = math.min(CHUNK, count - first - 1, count - slot)
    if n < 1 then
      return nil, h
    end
    local v = redis.call('GETRANGE', key, W * slot, W * (slot + n) - 1)
    if #v ~= W * n then
      return nil, h
    end
    local i = 0
    repeat
      i = i + 1
      tfirst = base + dec6(v, W * (i - 1) + 1)
    until tfirst > cut or i == n
    if tfirst <= cut then
      return nil, h -- further than the entries read
    end
    first = first + i
  end
  local live = count - first
  if live + cost > limit then
    -- The entry whose leaving frees room for cost, if it is first.
    if count + cost - limit - 1 ~= first then
      return nil, h
    end
    return false, limit - live, newest + window - now, tfirst + window - now, ep
  end
  local append = head == 0 and count + cost < limit
  if not append and (count ~= limit or head + cost > count) then
    return nil, h
  end
  local t = math.max(now, newest) -- a clock that stepped back keeps the order
  if t - base >= SPAN then
    return nil, h -- the general path rebases the ring
  end
  redis.call('PEXPIRE', key, ttl(t + window)) -- first: see oomFirst
  if append then
    -- Append, the header after the new entries.
    redis.call('SETRANGE', key, W * count, packTail(cost, t, ep, 0, count + cost, first, base, tfirst, t))
  elseif head + cost == count then
    -- Full: overwrite the cost oldest, which have left the window
    -- (live + cost <= limit = count), up to the last slot, which the
    -- header follows.
    redis.call('SETRANGE', key, W * head, packTail(cost, t, ep, 0, count, first - cost, base, tfirst, t))
  else
    -- Full, as above, short of the last slot.
    redis.call('SETRANGE', key, W * head, string.rep(enc6(t - base), cost))
    redis.call('SETRANGE', key, W * count, packHeader(ep, head + cost, count, first - cost, base, tfirst, t))
  end
  return true, limit - live - cost, t + window - now, 0, ep
end

-- Fast path: a call of one group of one sliding-window hit that records,
-- the common case at light load (a Take sent alone). Where quick does not
-- decide it, the general path below does, from the header quick read;
-- quick spares it building the general path's functions, which costs
-- several microseconds per call (BENCHMARKS.md).
local header -- a sliding window's header that quick read and left undecided
if record and alone and alg == 's' and not overdraw then
  local ok, remaining, reset, retry, ep = quick(key, cost, limit, window, epoch)
  if ok ~= nil then
    return {now, ok and 1 or 0, remaining, reset, retry, ok and ep or 0}
  end
  header = remaining
end

-- num is tonumber, once per distinct string of the call: a batch repeats
-- its rules' figures, and glibc's strtod costs a take more than a table
-- lookup (callgrind, BENCHMARKS.md).
-- It starts with the first group's figures, which the top read.
local nums = {[ARGV[3] or ''] = nhits, [ARGV[5] or ''] = cost, [ARGV[6] or ''] = limit, [ARGV[7] or ''] = window}
local function num(s)
  local v = nums[s]
  if v == nil then
    v = tonumber(s)
    if v ~= nil then
      nums[s] = v
    end
  end
  return v
end

-- Every group, hit by hit in KEYS order: out[1] is the time, and hit h's
-- five values are out[5 * h - 3] to out[5 * h + 1].
local out = {now}
-- The groups done (g0), their hits (h0) and the next argument (a0).
local g0, h0, a0 = 0, 0, 2

-- Batch path: the groups of one sliding-window hit at the start of a call
-- that records (the group commit's usual call, a batch of lone Takes), each
-- decided by quick as it comes, with no table of arguments; a call made of
-- them alone (1 + 7 arguments per key) returns here. The first group that
-- quick does not decide, and every group after it, go to the general path,
-- with the header quick read. A call of another shape skips this path, so
-- that the general path rejects a malformed one before it writes anything.
-- The short form (mode "2") is decided here alone, its shape checked
-- first.
local short = mode == '2'
if short then
  if #ARGV ~= 4 + #KEYS then
    error('redisstore: take: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments in short form')
  end
  cost, limit, window = num(ARGV[2]), num(ARGV[3]), num(ARGV[4])
  a0 = 5
  while h0 < #KEYS do
    local ok, remaining, reset, retry, ep = quick(KEYS[h0 + 1], cost, limit, window, ARGV[a0])
    if ok == nil then
      header = remaining
      break
    end
    local o = 5 * h0 + 1
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok and 1 or 0, remaining, reset, retry, ok and ep or 0
    g0, h0, a0 = g0 + 1, h0 + 1, a0 + 1
  end
  if h0 == #KEYS then
    return out
  end
elseif record and header == nil and #ARGV == 1 + 7 * #KEYS then
  local nargs = #ARGV
  while a0 < nargs do
    if ARGV[a0 + 1] ~= '1' or ARGV[a0 + 2] ~= 's' or ARGV[a0 + 6] ~= '0' then
      break
    end
    local ok, remaining, reset, retry, ep = quick(KEYS[h0 + 1], num(ARGV[a0 + 3]), num(ARGV[a0 + 4]),
      num(ARGV[a0 + 5]), ARGV[a0])
    if ok == nil then
      header = remaining
      break
    end
    local o = 5 * h0 + 1
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = ok and 1 or 0, remaining, reset, retry, ok and ep or 0
    g0, h0, a0 = g0 + 1, h0 + 1, a0 + 7
  end
  if a0 > nargs then
    return out
  end
end

-- The general path, from group g0 + 1.

-- The arguments of every hit h from h0 + 1 to #KEYS, in KEYS order:
-- keys[h] (KEYS itself), algs[h], costs[h], limits[h], windows[h] and
-- overdraws[h]; and of every group g from g0 + 1 to ngroups: epochs[g] and
-- sizes[g] (its nhits). overdraws holds the overdraw hits alone (true), and
-- is nil in a call without one: a table per call costs Redis 3% of a
-- batch's instructions (BENCHMARKS.md).
local epochs, sizes = {}, {}
local keys, algs, costs, limits, windows = KEYS, {}, {}, {}, {}
local overdraws
local ngroups = g0
do
  local a, h, nargs = a0, h0, nargs0 -- the next argument, the hits read
  if short then
    -- One lone sliding-window take per argument.
    while a <= nargs do
      ngroups, h = ngroups + 1, h + 1
      epochs[ngroups], sizes[ngroups] = ARGV[a], 1
      algs[h], costs[h], limits[h], windows[h] = 's', cost, limit, window
      a = a + 1
    end
  else
    repeat
      ngroups = ngroups + 1
      local g = ngroups
      epochs[g], sizes[g] = ARGV[a], num(ARGV[a + 1]) or 0
      a = a + 2
      for _ = 1, math.min(sizes[g], nargs) do -- a malformed nhits cannot spin the script
        h = h + 1
        algs[h], costs[h], limits[h], windows[h] = ARGV[a], num(ARGV[a + 1]), num(ARGV[a + 2]), num(ARGV[a + 3])
        if ARGV[a + 4] == '1' then
          overdraws = overdraws or {}
          overdraws[h] = true
        end
        a = a + 5
      end
    until a > nargs
  end
  if a ~= nargs + 1 or h ~= #KEYS then
    error('redisstore: take: ' .. #KEYS .. ' keys and ' .. nargs .. ' arguments for ' .. ngroups ..
      ' groups of ' .. h .. ' hits')
  end
end

-- Integer arithmetic on doubles: every value stays below 2^53, where
-- doubles are exact; divisions are corrected so that rounding never moves
-- a quotient across an integer.
local function floordiv(a, b)
  local q = floor(a / b)
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

-- What a state holds past its limit (floodgate.Hit.Overdraw; Go's copy is
-- internal/algo), each bound named where it is used: a debt of at most the
-- capacity. A fixed window counts up to MAXCOUNT (twice its limit), a
-- sliding-window counter up to twice its limit and the count c with
-- (c + 1) * window at most 2^53 us, a token bucket's TAT runs up to AHEAD
-- (a full bucket's refill time, at most ten years) past a full bucket's,
-- and a ring keeps up to LOGDEBT (its limit, at most 100) times past its
-- limit. A hit that would carry a state
-- past its bound fills it, and the state takes the epoch after its own,
-- ep % (2^48 - 1) + 1 (epochs run from 1 to 2^48 - 1). (A constant shared
-- by the functions would cost every call that builds them an upvalue:
-- 1.5% of a lone token-bucket take's instructions for three, BENCHMARKS.md.)

-- Each check returns allowed, remaining, reset_after, retry_after, the
-- value that write needs to record the hit (a sliding window's: the ring
-- it read, nil for none; nil when the hit is not to be recorded), the
-- epoch of the state it found (nil if none), and whether recording the
-- hit fills the state to its bound (an overdraw hit's). An overdraw hit
-- past its limit is answered as the key stands with it recorded: a denial
-- of cost 1. Checks write nothing.

-- ringHeader encodes the header of a ring r.
local function ringHeader(r)
  return packHeader(r.ep, r.head, r.count, r.first, r.base, r.tfirst, r.newest)
end

local function malformed(key)
  error('redisstore: sliding window ' .. key .. ': malformed state')
end

-- ringOpen reads the header of the ring of key (h, when the caller read
-- it already): a table with the key and the header's fields, or nil if
-- there is no ring.
local function ringOpen(key, h)
  h = h or redis.call('GETRANGE', key, HDRFROM, HDRTO)
  if h == '' then
    return nil
  end
  if #h ~= HDR then
    malformed(key)
  end
  local ep, head, count, first, base, tfirst, newest = headerFields(h, 1)
  if count == 0 or head >= count or first > count then
    malformed(key)
  end
  return {key = key, ep = ep, head = head, count = count, first = first, base = base, tfirst = tfirst,
    newest = newest}
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
      malformed(r.key)
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
    local mid = floor((lo + hi) / 2)
    local tm = ringAt(r, mid)
    if tm > cut then
      hi, thi = mid, tm
    else
      lo = mid
    end
  end
  r.first, r.tfirst = hi, thi
end

-- sliding checks a sliding-window hit (h: its header, if read already);
-- when it is to be recorded, its value is the ring it read, trimmed (nil
-- for a new one), which recordSliding writes.
local function sliding(key, cost, limit, window, over, h)
  local r = ringOpen(key, h)
  local live = 0
  if r ~= nil then
    ringTrim(r, now - window)
    live = r.count - r.first
  end
  if live + cost <= limit then
    -- Recorded at rec, or at the newest entry if later (recordSliding).
    return true, limit - live - cost, math.max(rec, r and r.newest or rec) + window - now, 0, r, r and r.ep
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
  -- The entry whose leaving frees room for cost: live, as live + cost >
  -- limit puts it at or after first, whatever the ring's count against
  -- the limit.
  local frees = ringAt(r, r.count + cost - limit - 1)
  return false, limit - live, r.newest + window - now, frees + window - now, nil, r.ep
end

-- ringRewrite writes the ring r whole, keeping only its live entries
-- (first to count - 1) and appending cost entries at t: head 0, first 0,
-- allocated exactly. It rebases the ring when it keeps nothing (base t),
-- or when t would not fit the base (base the oldest live entry's time,
-- every live entry decoded and encoded again); otherwise it copies the
-- live entries as they are.
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
  parts[#parts + 1] = string.rep(enc6(t - r.base), cost)
  r.count, r.head, r.first, r.newest = live + cost, 0, 0, t
  parts[#parts + 1] = ringHeader(r)
  local s = table.concat(parts)
  if #s ~= W * r.count + HDR then
    malformed(r.key)
  end
  local px = ttl(t + window)
  redis.call('PEXPIRE', r.key, px) -- first: see oomFirst
  redis.call('SET', r.key, s, 'PX', px)
end

-- recordSliding records cost requests at now in the ring r of key, as its
-- check read it (nil: none; epoch is then the new ring's). Past the limit
-- (over, an overdraw hit's), it keeps the live entries and appends, the
-- newest limit + LOGDEBT of them, written whole (head 0); full: the ring
-- then takes the epoch after its own.
local function recordSliding(key, cost, limit, window, epoch, r, over, full)
  if over then
    local LOGDEBT = math.min(limit, 100)
    if r == nil then
      r = {key = key, ep = tonumber(epoch), head = 0, count = 0, first = 0, base = now, tfirst = now, newest = now}
    end
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
    ringRewrite(r, math.min(cost, limit + LOGDEBT), math.max(now, r.newest), window)
    return
  end
  if r == nil then
    local px = ttl(rec + window)
    redis.call('PEXPIRE', key, px) -- first: see oomFirst
    redis.call('SET', key, string.rep(enc6(0), cost) ..
      ringHeader({ep = tonumber(epoch), head = 0, count = cost, first = 0, base = rec, tfirst = rec, newest = rec}),
      'PX', px)
    return
  end
  -- A clock that stepped back, or a lease's entries (at rec), keep the order.
  local t = math.max(rec, r.newest)
  if r.first == r.count or r.count > limit or (r.count < limit and (r.head ~= 0 or r.count + cost >= limit)) or
      t - r.base >= SPAN then
    -- Every entry has left the window, or the limit changed since the
    -- ring filled, or it fills up now, or t does not fit the base: write
    -- it whole, one SET that also sets the TTL.
    ringRewrite(r, cost, t, window)
    return
  end
  local entry = enc6(t - r.base)
  redis.call('PEXPIRE', key, ttl(t + window)) -- first: see oomFirst
  if r.count < limit then
    -- Not full (head is 0), and stays so: append, the header after the new entries.
    r.count, r.newest = r.count + cost, t
    redis.call('SETRANGE', key, W * (r.count - cost), string.rep(entry, cost) .. ringHeader(r))
  else
    -- Full: overwrite the cost oldest, which have left the window
    -- (live + cost <= limit = count), wrapping.
    local head, count = r.head, r.count
    local n = math.min(cost, count - head)
    r.head, r.first, r.newest = (head + cost) % count, r.first - cost, t
    if n == cost and head + n == count then
      -- The last slots: the header follows them.
      redis.call('SETRANGE', key, W * head, string.rep(entry, n) .. ringHeader(r))
    else
      redis.call('SETRANGE', key, W * head, string.rep(entry, n))
      if cost > n then
        redis.call('SETRANGE', key, 0, string.rep(entry, cost - n))
      end
      redis.call('SETRANGE', key, W * count, ringHeader(r))
    end
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
    -- A lease conforms now and is recorded as taken at rec (mode "3").
    local at = math.max(tat, rec) + cost * interval
    return true, math.max(0, floordiv(full - (at - now), interval)), at - now, 0, at, ep
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
  local MAXCOUNT = 2 * limit
  local n = count + cost -- past the limit: up to MAXCOUNT, never down
  local filled = n > MAXCOUNT
  if filled then
    n = math.max(count, MAXCOUNT)
  end
  return false, limit - n, left, left, fmt(idx) .. ':' .. fmt(n), ep, filled
end

-- rewritten maps the sliding windows this call has written to the group
-- (its index) that wrote them last.
local rewritten, group = {}, 0

-- write records a hit that its check allowed (ok), or an overdraw hit
-- past its limit: val, left and full are what its check returned, ep the
-- epoch of its state.
local function write(key, alg, cost, limit, window, ok, val, left, ep, full)
  if alg == 's' then
    if rewritten[key] == group then
      -- A group that names the key twice: the ring its check read is
      -- stale.
      val = ringOpen(key)
      ringTrim(val, now - window)
    end
    recordSliding(key, cost, limit, window, ep, val, not ok, full)
    rewritten[key] = group
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

-- A sliding-window counter: the string "<window index>:<previous
-- count>:<current count>:<epoch>". With t into the current window, a request is
-- admitted iff prev * (window - t) / window + cur + cost <= limit, all in
-- exact integers ((limit+1) * window < 2^53). memstore computes the same
-- formulas in nanoseconds.
local function counter(key, cost, limit, window, over)
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

-- Every group from g0 + 1, hit by hit, into out. A group records when
-- each of its hits is allowed or overdraw.
local oks, vals, lefts, eps, fulls -- per hit of a group of several, until the group is written
local h = h0 -- the hits done
for g = g0 + 1, ngroups do
  group = g
  local epoch, n = epochs[g], sizes[g]
  local first = h + 1 -- the group's first hit
  local all = true
  if n > 1 and vals == nil then
    oks, vals, lefts, eps, fulls = {}, {}, {}, {}, {}
  end
  for _ = 1, n do
    h = h + 1
    local key, alg, cost, limit, window = keys[h], algs[h], costs[h], limits[h], windows[h]
    local over = overdraws ~= nil and overdraws[h] == true
    local ok, remaining, reset, retry, val, ep, full
    local quickly = false
    if alg == 's' and n == 1 and record and header == nil and not over and rec == now then
      -- A group of one sliding-window hit that quick may record at once
      -- (unless the fast path above tried already, and left its header).
      ok, remaining, reset, retry, ep = quick(key, cost, limit, window, epoch)
      quickly = ok ~= nil
      if not quickly then
        header = remaining
      end
    end
    if quickly then
      -- decided, and recorded when allowed
    elseif alg == 's' then
      ok, remaining, reset, retry, val, ep, full = sliding(key, cost, limit, window, over, header)
    elseif alg == 't' then
      local capacity, interval = limit, window
      ok, remaining, reset, retry, val, ep, full = bucket(key, cost, capacity, interval, over)
    elseif alg == 'f' then
      ok, remaining, reset, retry, val, ep, full = fixed(key, cost, limit, window, over)
    elseif alg == 'c' then
      ok, remaining, reset, retry, val, ep, full = counter(key, cost, limit, window, over)
    else
      error('redisstore: unknown algorithm ' .. tostring(alg))
    end
    header = nil
    ep = ep or epoch
    local o = 5 * h - 4
    out[o + 1] = ok and 1 or 0
    out[o + 2] = remaining
    out[o + 3] = reset
    out[o + 4] = retry
    out[o + 5] = 0
    if n == 1 then
      -- A group of one hit records at once.
      if (ok or over) and record then
        if not quickly then
          write(key, alg, cost, limit, window, ok, val, reset, ep, full)
        end
        out[o + 5] = tonumber(ep)
      end
    else
      all = all and (ok or over)
      oks[h], vals[h], lefts[h], eps[h], fulls[h] = ok, val, reset, ep, full
    end
  end
  if n > 1 and record and all then
    for i = first, h do
      write(keys[i], algs[i], costs[i], limits[i], windows[i], oks[i], vals[i], lefts[i], eps[i], fulls[i])
      out[5 * i + 1] = tonumber(eps[i])
    end
  end
end
return out
