-- KEYS: stream meta side_in_flight sessions
-- ARGV: kind session payload side_limit since now
-- USES: doorbell
-- A job that does not touch history (a side question, a notice, a status reply).
-- With a side limit, it counts as a side question in flight and is refused (2)
-- when that many were enqueued since `since` and are not yet complete.
-- The session counts as active in the index: a command alone (a stranger's
-- refusal notice, say) leaves a meta hash, which retention must be able to find.
local stream, meta, side, sessions = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local kind, session, payload = ARGV[1], ARGV[2], ARGV[3]
local side_limit, since, now = ARGV[4], ARGV[5], ARGV[6]

if side_limit ~= '' then
  redis.call('ZREMRANGEBYSCORE', side, '-inf', since)
  if redis.call('ZCARD', side) >= tonumber(side_limit) then return {2, false} end
end
local job = redis.call('XADD', stream, '*', 'kind', kind, 'session', session,
                       'payload', payload)
if side_limit ~= '' then redis.call('ZADD', side, now, job) end
redis.call('HINCRBY', meta, 'owed', 1)
redis.call('ZADD', sessions, now, session)
ring(stream)
return {1, job}
