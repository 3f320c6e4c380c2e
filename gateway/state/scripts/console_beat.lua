-- KEYS: consoles
-- ARGV: stream alive_ms
-- A console run is alive: its stream's entry runs until `alive_ms` from now, on the
-- server's clock (runs on other machines compare the same clock). Returns 1 when
-- the entry was missing (another run took the stream over while this one seemed
-- gone), 0 when it was renewed.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
return redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
