-- KEYS: consoles from into queued side_in_flight
-- ARGV:
-- USES: doorbell
-- The jobs a console run left in its stream (`from`: its run's life ran out, it ended
-- with jobs left, or it never registered) moved, in order, to a live run's stream
-- (`into`), in one step: the session's queued-turn marker and its side questions in
-- flight follow their jobs, and `from` is removed. Each job stays owed as it was.
-- Returns how many jobs moved; 0, touching nothing, while `from`'s run is alive.
local consoles, from, into, queued, side = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local alive_until = redis.call('ZSCORE', consoles, from)
if alive_until and tonumber(alive_until) > now then return 0 end
local marker = redis.call('GET', queued)
local moved = 0
for _, entry in ipairs(redis.call('XRANGE', from, '-', '+')) do
  local old, fields = entry[1], entry[2]
  local job = redis.call('XADD', into, '*', unpack(fields))
  if marker == from .. ' ' .. old then redis.call('SET', queued, into .. ' ' .. job) end
  local asked = redis.call('ZSCORE', side, old)
  if asked then
    redis.call('ZREM', side, old)
    redis.call('ZADD', side, asked, job)
  end
  moved = moved + 1
end
redis.call('DEL', from)
redis.call('ZREM', consoles, from)
if moved > 0 then ring(into) end
return moved
