-- KEYS: queued stream meta sessions
-- ARGV: session now
-- A turn job for a session with no new message of its own: an approval was
-- decided (or timed out), or messages waited in the inbox behind a tool loop.
-- Nothing is enqueued while a live job is already queued for the session (the
-- same marker rule as the ingest script). Returns the job id, or false.
local queued, stream, meta, sessions = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local session, now = ARGV[1], ARGV[2]

local marker = redis.call('GET', queued)
if marker then
  local marker_stream, marker_job = string.match(marker, '^(%S+) (%S+)$')
  if marker_job and #redis.call('XRANGE', marker_stream, marker_job, marker_job) > 0 then
    return false
  end
  redis.call('DEL', queued)
  if tonumber(redis.call('HGET', meta, 'owed') or '0') > 0 then
    redis.call('HINCRBY', meta, 'owed', -1)
  end
end
local job = redis.call('XADD', stream, '*', 'kind', 'turn', 'session', session, 'payload', '')
redis.call('SET', queued, stream .. ' ' .. job)
redis.call('HINCRBY', meta, 'owed', 1)
redis.call('ZADD', sessions, now, session)
return job
