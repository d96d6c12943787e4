-- token_bucket: credit (µs of refill time, negative while requests wait their delay) and the
-- time it was last updated. Mirrors src/limit/token_bucket.rs.
local function check_token_bucket(key, now, w)
  local interval = w.interval
  local capacity = interval * w.burst
  local credit = capacity
  local stored = cell(key, 2)
  if stored then
    credit = math.min(stored[1] + math.max(now - stored[2], 0), capacity)
  end
  local after = credit - interval * w.cost
  if after < -w.max_delay then
    return deny(floor(math.max(credit, 0) / interval), capacity - credit, -w.max_delay - after)
  end
  local reset = capacity - after
  return allow(floor(math.max(after, 0) / interval), reset, math.max(-after, 0),
    int(after) .. ':' .. int(now), reset)
end
