-- sliding_log: a sorted set of admission times (µs scores). Exact, for small limits only.
-- Mirrors src/limit/sliding_log.rs.
local function check_sliding_log(key, now, p, at)
  local per, limit, cost = p[at + PER], p[at + LIMIT], p[at + COST]
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
  if used + cost > limit then
    local must_expire = used + cost - limit
    local retry_after = per
    if must_expire <= used then
      retry_after = math.max(tonumber(live[must_expire * 2]) + per - now, 0)
    end
    return false, math.max(limit - used, 0), reset, retry_after
  end
  return true, limit - used - cost, reset, 0, nil, per
end

-- Members are `now:n`, n counting up from the set's size: unique among entries of one
-- instant, since entries of `now` never expire at `now`.
local function commit_sliding_log(key, now, p, at)
  local removed = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', int(now - p[at + PER]))
  if type(removed) == 'table' and removed.err then
    redis.call('DEL', key)
  end
  local size = redis.call('ZCARD', key)
  for i = 1, p[at + COST] do
    redis.call('ZADD', key, now, int(now) .. ':' .. (size + i))
  end
end
