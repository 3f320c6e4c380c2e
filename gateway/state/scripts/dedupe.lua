-- The one dedupe rule of a platform event, shared by the scripts that take one in
-- (ingest, first_delivery): an event id's first delivery is the one that finds no
-- `seen` mark (`Keys.seen`); the mark lives `dedupe_ttl` seconds.

-- Whether this is the first delivery of the event marked at `seen`. With `mark` it is
-- marked seen in the same step, so a retry finds it; without, only looked at (the step
-- that writes the message marks it).
local function first_delivery(seen, dedupe_ttl, mark)
  if not mark then return redis.call('EXISTS', seen) == 0 end
  return redis.call('SET', seen, '1', 'NX', 'EX', dedupe_ttl) ~= false
end
