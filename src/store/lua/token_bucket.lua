-- token_bucket: credit (µs of refill time, negative while requests wait their delay) with lazy
-- refill. Mirrors src/limit/token_bucket.rs. Stored as one number, the time the bucket is full
-- again: credit at `now` is capacity - max(full_at - now, 0), which is the Rust
-- min(credit + elapsed, capacity) for the same history.
local function check_token_bucket(value, now, w)
  local interval = w.interval
  local capacity = interval * w.burst
  local credit = capacity
  local full_at = stored(value)
  if full_at then
    credit = capacity - math.max(full_at - now, 0)
  end
  local after = credit - interval * w.cost
  if after < -w.max_delay then
    return deny(floor(math.max(credit, 0) / interval), capacity - credit, -w.max_delay - after)
  end
  local reset = capacity - after
  return allow(floor(math.max(after, 0) / interval), reset, math.max(-after, 0),
    int(now + reset), reset)
end
