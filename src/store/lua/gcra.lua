-- gcra: the theoretical arrival time (TAT), in µs. Mirrors src/limit/gcra.rs.
local function check_gcra(value, now, w)
  local interval = w.interval
  local tolerance = interval * w.burst
  local tat = stored(value)
  local start = now
  if tat then
    start = math.max(tat, now)
  end
  local ahead = start + interval * w.cost - now
  local slack = tolerance + w.max_delay
  if ahead > slack then
    return deny(floor(math.max(tolerance - (start - now), 0) / interval), start - now, ahead - slack)
  end
  return allow(floor(math.max(tolerance - ahead, 0) / interval), ahead,
    math.max(ahead - tolerance, 0), int(now + ahead), ahead)
end
