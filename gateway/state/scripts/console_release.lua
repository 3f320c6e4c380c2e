-- KEYS: consoles stream
-- ARGV:
-- A console run ends. An empty stream goes, with its entry; one with jobs left is
-- marked as ended (score 0), so the next console run takes them over at once.
-- Returns how many jobs were left.
local consoles, stream = KEYS[1], KEYS[2]
local left = redis.call('XLEN', stream)
if left == 0 then
  redis.call('DEL', stream)
  redis.call('ZREM', consoles, stream)
else
  redis.call('ZADD', consoles, 0, stream)
end
return left
