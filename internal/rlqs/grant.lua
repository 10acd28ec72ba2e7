-- grant.lua: one holder's claim on one RLQS bucket (package rlqs, ledger.go's
-- grant, which this script repeats: the same algorithm, the same figures).
--
-- KEYS[1]  the bucket's hash: field = holder, value =
--          "<demand>:<demand expiry>[:<share>:<expiry>]..." (µs, server time),
--          the grants newest last, each share larger than every later one's;
--          a negative demand is a claim not measured yet (-claim), which the
--          other holders' fair shares leave out
-- ARGV[1]  holder
-- ARGV[2]  capacity (units per window)
-- ARGV[3]  demand (units per window; 0 withdraws the holder's demand; -1: not
--          measured yet, an equal split of the capacity among the holders)
-- ARGV[4]  keep: the share in force
-- ARGV[5]  hysteresis: a fair share within it of keep grants keep
-- ARGV[6]  ttl (µs): how long the grant counts
-- Reply    {share, fair}
-- Redis 5.0 or later (TIME, HGETALL, PEXPIREAT).
local holder = ARGV[1]
local capacity = tonumber(ARGV[2])
local demand = tonumber(ARGV[3])
local keep = tonumber(ARGV[4])
local hyst = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function parse(v)
  local f = {}
  for n in string.gmatch(v, '[^:]+') do f[#f + 1] = tonumber(n) end
  local h = {demand = f[1] or 0, dexp = f[2] or 0, grants = {}}
  for i = 3, #f - 1, 2 do
    if f[i + 1] > now then h.grants[#h.grants + 1] = {f[i], f[i + 1]} end
  end
  if h.dexp <= now then h.demand = 0 end
  return h
end

local function held(h)
  local m = 0
  for _, g in ipairs(h.grants) do
    if g[1] > m then m = g[1] end
  end
  return m
end

local all = redis.call('HGETALL', KEYS[1])
local me = {demand = 0, dexp = 0, grants = {}}
local demands, others, latest = {}, 0, now + ttl
for i = 1, #all, 2 do
  local h = parse(all[i + 1])
  if all[i] == holder then
    me = h
  elseif #h.grants == 0 and h.demand == 0 then
    redis.call('HDEL', KEYS[1], all[i])
  else
    if h.demand > 0 then demands[#demands + 1] = h.demand end
    others = others + held(h)
  end
end
local stored = demand
if demand < 0 then
  local n = 1
  for i = 1, #all, 2 do
    if all[i] ~= holder and redis.call('HEXISTS', KEYS[1], all[i]) == 1 then n = n + 1 end
  end
  demand = math.floor(capacity / n)
  stored = -demand
end
if demand > 0 then demands[#demands + 1] = demand end

local fair = 0
if demand > 0 then
  table.sort(demands)
  local left, n, level = capacity, #demands, capacity
  for _, d in ipairs(demands) do
    local l = math.floor(left / n)
    if d > l then level = l break end
    left = left - d
    n = n - 1
  end
  fair = math.min(demand, level)
end
local want = fair
if keep > 0 and math.abs(fair - keep) <= hyst then want = keep end
local share = math.max(0, math.min(want, capacity - others))

local kept = {}
for _, g in ipairs(me.grants) do
  if share <= 0 or g[1] > share then kept[#kept + 1] = g end
end
if share > 0 then kept[#kept + 1] = {share, now + ttl} end
if #kept == 0 and demand == 0 then
  redis.call('HDEL', KEYS[1], holder)
else
  local parts = {string.format('%d', stored), string.format('%d', now + ttl)}
  for _, g in ipairs(kept) do
    parts[#parts + 1] = string.format('%d', g[1])
    parts[#parts + 1] = string.format('%d', g[2])
  end
  redis.call('HSET', KEYS[1], holder, table.concat(parts, ':'))
end
-- The hash lives as long as its newest grant or demand could count.
local ttlms = redis.call('PTTL', KEYS[1])
if ttlms < math.ceil(ttl / 1000) then
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
end
return {share, fair}
