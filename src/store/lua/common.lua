-- Shared by every algorithm. Redis runs Lua 5.1, whose numbers are doubles: every quantity
-- here is a whole number of microseconds or requests below 2^53, so the arithmetic is exact
-- (the gateway refuses configurations that could leave that range).
--
-- Each window's state is one integer below 2^53. The windows of one limit identity share a
-- key: a string of two little-endian doubles per window, at the window's slot (its place in
-- the limit's rates): when the state expires (µs) and the state. One key per identity halves
-- the writes of a limit of two windows (each `redis.call` is most of a window's cost).
--
-- Redis runs this whole file on every call, and its Lua allocates slowly: a check reads its
-- window's numbers in place (`p[at + LIMIT]`) and answers with several values, not tables.
-- Each check returns allowed, remaining, reset, wait (retry_after when denied, the delay when
-- allowed), then, when allowed, the state to store and for how long.
local floor = math.floor

-- Where each of a window's eleven numbers sits after its offset in the parameters.
local ALGORITHM, GROUP, SHADOW, LIMIT, PER, INTERVAL, BURST, COST, MAX_DELAY, KEY, SLOT =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
local WINDOW_NUMBERS = 11

-- '%d' formats a whole double exactly (Lua 5.1 casts it to a 64-bit long) at a quarter of
-- the cost of '%.0f', which goes through the floating-point printer. For sliding logs' scores
-- and members.
local function int(n)
  return string.format('%d', n)
end
