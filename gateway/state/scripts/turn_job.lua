-- A session's queued-turn marker ("<stream> <job id>"), shared by the scripts that
-- enqueue turns (ingest, enqueue_turn, decide): at most one live turn job per session.
-- Those scripts use doorbell.lua too, before this.

-- Whether a live turn job is queued for the session. A marker whose job is gone
-- (its stream was removed) would block every later turn: it is dropped, with the
-- job it owed.
local function turn_job_queued(queued, meta)
  local marker = redis.call('GET', queued)
  if not marker then return false end
  local marker_stream, marker_job = string.match(marker, '^(%S+) (%S+)$')
  if marker_job and #redis.call('XRANGE', marker_stream, marker_job, marker_job) > 0 then
    return true
  end
  redis.call('DEL', queued)
  if tonumber(redis.call('HGET', meta, 'owed') or '0') > 0 then
    redis.call('HINCRBY', meta, 'owed', -1)
  end
  return false
end

-- Add a turn job for the session and mark it queued; returns the job id.
local function add_turn_job(stream, queued, meta, session, payload)
  local job = redis.call('XADD', stream, '*', 'kind', 'turn', 'session', session,
                         'payload', payload)
  redis.call('SET', queued, stream .. ' ' .. job)
  redis.call('HINCRBY', meta, 'owed', 1)
  ring(stream)
  return job
end
