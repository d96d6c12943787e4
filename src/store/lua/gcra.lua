-- gcra: the theoretical arrival time (TAT), in µs. Mirrors src/limit/gcra.rs.
local function check_gcra(tat, now, p, at)
  local interval = p[at + INTERVAL]
  local tolerance = interval * p[at + BURST]
  local start = now
  if tat then
    start = math.max(tat, now)
  end
  local ahead = start + interval * p[at + COST] - now
  local slack = tolerance + p[at + MAX_DELAY]
  if ahead > slack then
    return false, floor(math.max(tolerance - (start - now), 0) / interval), start - now,
      ahead - slack
  end
  return true, floor(math.max(tolerance - ahead, 0) / interval), ahead,
    math.max(ahead - tolerance, 0), now + ahead, ahead
end
