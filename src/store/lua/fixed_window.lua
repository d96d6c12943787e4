-- fixed_window: the count of the current calendar window. Mirrors src/limit/fixed_window.rs.
-- Stored as (window index mod 2^20, count < 2^33): the key expires when its window ends, so
-- a state 2^20 windows old never exists to be mistaken for the current one.
local FIXED_FIELDS = { 20, 33 }

local function check_fixed_window(value, now, w)
  local per = w.per
  local index = floor(now / per)
  local tag = index % 2 ^ 20
  local count = 0
  local state = stored(value)
  if state then
    local fields = unpack_fields(state, FIXED_FIELDS)
    if fields[1] == tag then
      count = fields[2]
    end
  end
  local reset = (index + 1) * per - now
  if count + w.cost > w.limit then
    return deny(math.max(w.limit - count, 0), reset, reset)
  end
  return allow(w.limit - count - w.cost, reset, 0,
    int(pack_fields({ tag, count + w.cost }, FIXED_FIELDS)), reset)
end
