-- KEYS: queued stream meta sessions
-- ARGV: session now
-- USES: doorbell turn_job
-- A turn job for a session with no new message of its own: an approval was
-- decided (or timed out), or messages waited in the inbox behind a tool loop.
-- Nothing is enqueued while a live job is already queued for the session (the
-- same marker rule as the ingest script, turn_job.lua). Returns the job id, or false.
local queued, stream, meta, sessions = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local session, now = ARGV[1], ARGV[2]

if turn_job_queued(queued, meta) then return false end
local job = add_turn_job(stream, queued, meta, session, '')
redis.call('ZADD', sessions, now, session)
return job
