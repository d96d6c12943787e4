-- sliding_log: a sorted set of admission times (µs scores). Exact, for small limits only.
-- Mirrors src/limit/sliding_log.rs.
local function check_sliding_log(key, now, w)
  local per = w.per
  -- A key of another type (written by someone else) reads as an empty log and is replaced on
  -- commit, rather than failing every request that meets it.
  local live = redis.pcall('ZRANGEBYSCORE', key, '(' .. int(now - per), '+inf', 'WITHSCORES')
  if live.err then
    live = {}
  end
  local used = #live / 2
  local newest = now
  if used > 0 then
    newest = math.max(tonumber(live[#live]), now)
  end
  local reset = newest + per - now
  if used + w.cost > w.limit then
    local must_expire = used + w.cost - w.limit
    local retry_after = per
    if must_expire <= used then
      retry_after = math.max(tonumber(live[must_expire * 2]) + per - now, 0)
    end
    return deny(math.max(w.limit - used, 0), reset, retry_after)
  end
  return allow(w.limit - used - w.cost, reset, 0, nil, per)
end

-- Members are `now:n`, n counting up from the set's size: unique among entries of one
-- instant, since entries of `now` never expire at `now`.
local function commit_sliding_log(key, now, w)
  local removed = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', int(now - w.per))
  if type(removed) == 'table' and removed.err then
    redis.call('DEL', key)
  end
  local size = redis.call('ZCARD', key)
  for i = 1, w.cost do
    redis.call('ZADD', key, now, int(now) .. ':' .. (size + i))
  end
end
