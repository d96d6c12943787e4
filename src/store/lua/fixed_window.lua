-- fixed_window: calendar window index (+1) and its count. Mirrors src/limit/fixed_window.rs.
local function check_fixed_window(key, now, w)
  local per = w.per
  local index = floor(now / per)
  local count = 0
  local stored = cell(key, 2)
  if stored and stored[1] == index + 1 then
    count = stored[2]
  end
  local reset = (index + 1) * per - now
  if count + w.cost > w.limit then
    return deny(math.max(w.limit - count, 0), reset, reset)
  end
  return allow(w.limit - count - w.cost, reset, 0, int(index + 1) .. ':' .. int(count + w.cost), reset)
end
