-- KEYS: stream meta side_in_flight
-- ARGV: group job
-- A job whose effect is recorded: acknowledged, removed, and no longer owed.
-- Only the first completion counts (a second one finds nothing to acknowledge).
local stream, meta, side = KEYS[1], KEYS[2], KEYS[3]
local group, job = ARGV[1], ARGV[2]
local acked = redis.call('XACK', stream, group, job)
if acked == 1 then
  redis.call('XDEL', stream, job)
  if tonumber(redis.call('HGET', meta, 'owed') or '0') > 0 then
    redis.call('HINCRBY', meta, 'owed', -1)
  end
  redis.call('ZREM', side, job)
end
return acked
