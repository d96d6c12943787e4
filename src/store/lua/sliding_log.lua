-- sliding_log: a sorted set of admission times (µs scores), one key per window. Exact, for
-- small limits only. Mirrors src/limit/sliding_log.rs.
--
-- A log is never read whole. The first request of a call that meets a log counts its live
-- entries (ZCOUNT) and reads its newest; the log's table keeps both for every later request
-- of the call, with how many entries those requests added (all at `now`, so newer than any
-- other). A denial reads only the entry whose expiry it waits for, once per call. The call's
-- new entries go in with one ZADD at the end (`write_sliding_logs`): under merging, a hot
-- key's log costs a few commands per call instead of a read of the whole log per request.
local logs, dirty_logs = {}, {}

local function log_of(key, now, per)
  local log = logs[key]
  if log then
    return log
  end
  log = { live = 0, newest = nil, added = 0, foreign = false, nth = {}, per = per }
  -- A key of another type (written by someone else) reads as an empty log and is replaced
  -- on commit, rather than failing every request that meets it.
  local live = redis.pcall('ZCOUNT', key, '(' .. int(now - per), '+inf')
  if type(live) == 'table' then
    log.foreign = true
  elseif live > 0 then
    log.live = live
    log.newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  logs[key] = log
  return log
end

-- The time of the n-th oldest live entry that was in the log before this call (n <= live).
local function nth_live(key, log, n, now)
  local at = log.nth[n]
  if not at then
    local entry = redis.call('ZRANGEBYSCORE', key, '(' .. int(now - log.per), '+inf',
      'WITHSCORES', 'LIMIT', n - 1, 1)
    at = tonumber(entry[2])
    log.nth[n] = at
  end
  return at
end

local function check_sliding_log(key, now, p, at)
  local per, limit, cost = p[at + PER], p[at + LIMIT], p[at + COST]
  local log = log_of(key, now, per)
  local used = log.live + log.added
  local newest = math.max(log.newest or now, now)
  local reset = newest + per - now
  if used + cost > limit then
    -- The oldest (used + cost - limit) entries must expire first; when that reaches this
    -- call's own entries (at `now`), a whole window.
    local must_expire = used + cost - limit
    local retry_after = per
    if must_expire <= log.live then
      retry_after = math.max(nth_live(key, log, must_expire, now) + per - now, 0)
    end
    return false, math.max(limit - used, 0), reset, retry_after
  end
  return true, limit - used - cost, reset, 0, nil, per
end

-- Records an admitted request in the call's table of its log (checked just before).
local function commit_sliding_log(key, p, at)
  local log = logs[key]
  if log.added == 0 then
    dirty_logs[#dirty_logs + 1] = key
  end
  log.added = log.added + p[at + COST]
end

-- Writes every log the call added to: expired entries dropped, the new ones added in one ZADD
-- (members `now:n`, n counting on from the live entries: unique among entries of one instant,
-- since entries of `now` never expire at `now`), and the key kept for a window.
local function write_sliding_logs(now)
  for d = 1, #dirty_logs do
    local key = dirty_logs[d]
    local log = logs[key]
    if log.foreign then
      redis.call('DEL', key)
    else
      redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - log.per))
    end
    local entries, stamp = {}, int(now)
    for i = 1, log.added do
      entries[2 * i - 1], entries[2 * i] = now, stamp .. ':' .. (log.live + i)
    end
    redis.call('ZADD', key, unpack(entries))
    redis.call('PEXPIRE', key, math.max(math.ceil(log.per / 1000), 1))
  end
end
