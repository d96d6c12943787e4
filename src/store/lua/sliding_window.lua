-- sliding_window: the previous and current calendar counts, the previous one weighted by how
-- much of it still overlaps the sliding window. Mirrors src/limit/sliding_window.rs.
-- Stored as (tag * 2^23 + previous) * 2^23 + current (tag: the window index mod 2^7; counts
-- < 2^23): the state expires two windows after its last write, so an index 128 windows old
-- never exists to be misread.
local SLIDING_TAGS, SLIDING_COUNTS = 2 ^ 7, 2 ^ 23

local function sliding_retry_after(prev, curr, elapsed, per, limit, cost)
  local left_in_window = per - elapsed
  if curr + cost <= limit and prev > 0 then
    local room = (limit - curr - cost) * per
    local wait = math.max(left_in_window - floor(room / prev), 0)
    if wait < left_in_window then
      return wait
    end
  end
  local wait_next = 0
  if curr > 0 then
    wait_next = math.max(per - floor(math.max(limit - cost, 0) * per / curr), 0)
  end
  return left_in_window + wait_next
end

local function check_sliding_window(state, now, p, at)
  local per, limit, cost = p[at + PER], p[at + LIMIT], p[at + COST]
  local index = floor(now / per)
  local tag = index % SLIDING_TAGS
  local elapsed = now - index * per
  local prev, curr = 0, 0
  if state then
    local counts = state % (SLIDING_COUNTS * SLIDING_COUNTS)
    local stored_tag = floor(state / (SLIDING_COUNTS * SLIDING_COUNTS)) % SLIDING_TAGS
    if stored_tag == tag then
      prev, curr = floor(counts / SLIDING_COUNTS), counts % SLIDING_COUNTS
    elseif stored_tag == (index - 1) % SLIDING_TAGS then
      prev = counts % SLIDING_COUNTS
    end
  end
  local weight_left = per - elapsed
  local used = prev * weight_left + curr * per
  local reset = 2 * per - elapsed
  if used + cost * per > limit * per then
    return false, floor(math.max(limit * per - used, 0) / per), reset,
      sliding_retry_after(prev, curr, elapsed, per, limit, cost)
  end
  curr = curr + cost
  local remaining = floor((limit * per - prev * weight_left - curr * per) / per)
  return true, remaining, reset, 0, (tag * SLIDING_COUNTS + prev) * SLIDING_COUNTS + curr,
    reset
end
