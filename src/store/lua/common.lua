-- Shared by every algorithm. Redis runs Lua 5.1, whose numbers are doubles: every quantity
-- here is a whole number of microseconds or requests below 2^53, so the arithmetic is exact
-- (the gateway refuses configurations that could leave that range).
--
-- Each window's state is one integer below 2^53, which Redis stores inside the key's object
-- (no separate string): the smallest a key can be.
--
-- Redis runs this whole file on every call, and its Lua allocates slowly: a check reads its
-- window's numbers in place (`p[at + LIMIT]`) and answers with several values, not tables.
-- Each check returns allowed, remaining, reset, wait (retry_after when denied, the delay when
-- allowed), then, when allowed, the state to store and for how long.
local floor = math.floor

-- Where each of a window's nine numbers sits after its offset in the parameters.
local ALGORITHM, GROUP, SHADOW, LIMIT, PER, INTERVAL, BURST, COST, MAX_DELAY =
  1, 2, 3, 4, 5, 6, 7, 8, 9
local WINDOW_NUMBERS = 9

-- '%d' formats a whole double exactly (Lua 5.1 casts it to a 64-bit long) at a quarter of
-- the cost of '%.0f', which goes through the floating-point printer.
local function int(n)
  return string.format('%d', n)
end
