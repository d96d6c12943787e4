-- sliding_window: the previous and current calendar counts, the previous one weighted by how
-- much of it still overlaps the sliding window. Mirrors src/limit/sliding_window.rs.
-- Stored as (window index mod 2^7, previous < 2^23, current < 2^23): the key expires two
-- windows after its last write, so an index 128 windows old never exists to be misread.
local SLIDING_FIELDS = { 7, 23, 23 }

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

local function check_sliding_window(value, now, w)
  local per, limit, cost = w.per, w.limit, w.cost
  local index = floor(now / per)
  local tag = index % 2 ^ 7
  local elapsed = now - index * per
  local prev, curr = 0, 0
  local state = stored(value)
  if state then
    local fields = unpack_fields(state, SLIDING_FIELDS)
    if fields[1] == tag then
      prev, curr = fields[2], fields[3]
    elseif fields[1] == (index - 1) % 2 ^ 7 then
      prev = fields[3]
    end
  end
  local weight_left = per - elapsed
  local used = prev * weight_left + curr * per
  local reset = 2 * per - elapsed
  if used + cost * per > limit * per then
    return deny(floor(math.max(limit * per - used, 0) / per), reset,
      sliding_retry_after(prev, curr, elapsed, per, limit, cost))
  end
  curr = curr + cost
  local remaining = floor((limit * per - prev * weight_left - curr * per) / per)
  return allow(remaining, reset, 0, int(pack_fields({ tag, prev, curr }, SLIDING_FIELDS)), reset)
end
