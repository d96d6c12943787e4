-- token_bucket: credit (µs of refill time, negative while requests wait their delay) with lazy
-- refill. Mirrors src/limit/token_bucket.rs. Stored as one number, the time the bucket is full
-- again: credit at `now` is capacity - max(full_at - now, 0), which is the Rust
-- min(credit + elapsed, capacity) for the same history.
local function check_token_bucket(full_at, now, p, at)
  local interval, max_delay = p[at + INTERVAL], p[at + MAX_DELAY]
  local capacity = interval * p[at + BURST]
  local credit = capacity
  if full_at then
    credit = capacity - math.max(full_at - now, 0)
  end
  local after = credit - interval * p[at + COST]
  if after < -max_delay then
    return false, floor(math.max(credit, 0) / interval), capacity - credit, -max_delay - after
  end
  local reset = capacity - after
  return true, floor(math.max(after, 0) / interval), reset, math.max(-after, 0),
    now + reset, reset
end
