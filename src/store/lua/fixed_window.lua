-- fixed_window: the count of the current calendar window. Mirrors src/limit/fixed_window.rs.
-- Stored as tag * 2^33 + count (tag: the window index mod 2^20, count < 2^33): the state expires
-- when its window ends, so a state 2^20 windows old never exists to be mistaken for the
-- current one.
local FIXED_TAGS, FIXED_COUNTS = 2 ^ 20, 2 ^ 33

local function check_fixed_window(state, now, p, at)
  local per, limit, cost = p[at + PER], p[at + LIMIT], p[at + COST]
  local index = floor(now / per)
  local tag = index % FIXED_TAGS
  local count = 0
  if state and floor(state / FIXED_COUNTS) % FIXED_TAGS == tag then
    count = state % FIXED_COUNTS
  end
  local reset = (index + 1) * per - now
  if count + cost > limit then
    return false, math.max(limit - count, 0), reset, reset
  end
  return true, limit - count - cost, reset, 0, tag * FIXED_COUNTS + count + cost, reset
end
