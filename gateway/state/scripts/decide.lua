-- KEYS: approvals seen queued stream meta sessions
-- ARGV: approval_id platform user status session now dedupe_ttl
-- USES: doorbell turn_job
-- Settle a pending approval and enqueue the turn that continues it, in one step.
-- `status` is approved or declined for a click by `user`, timeout when the
-- deadline passed (no user). Only a pending approval of this platform is
-- settled; only its asker may click (anyone else: "not yours", nothing
-- changes); a click that comes after the deadline settles it as timed out and
-- is told "closed". A click is deduped on its event (`seen`): a retried
-- delivery gets the first delivery's verdict and changes nothing.
-- The continuation turn follows turn_job.lua's rule (no second job while a
-- live one is queued). Returns the verdict: approved, declined, timeout,
-- not yours or closed. The due index's entry is removed after, in a step of its
-- own (gateway/approvals/store.py).
local approvals, seen, queued = KEYS[1], KEYS[2], KEYS[3]
local stream, meta, sessions = KEYS[4], KEYS[5], KEYS[6]
local id, platform, user, status = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local session, now, dedupe_ttl = ARGV[5], ARGV[6], ARGV[7]
local click = status ~= 'timeout'

local function enqueue_turn()
  if turn_job_queued(queued, meta) then return end
  add_turn_job(stream, queued, meta, session, '')
  redis.call('ZADD', sessions, now, session)
end

local function settle()
  local raw = redis.call('HGET', approvals, id)
  if not raw or redis.call('HGET', approvals, id .. ':status') ~= 'pending' then
    return 'closed'
  end
  local record = cjson.decode(raw)
  if record.platform ~= platform then return 'closed' end
  local expired = tonumber(record.deadline) <= tonumber(now)
  local verdict = status
  if not click then
    if not expired then return 'closed' end
  elseif record.asker ~= user then
    return 'not yours'
  elseif expired then
    status, verdict = 'timeout', 'closed'
  end
  redis.call('HSET', approvals, id .. ':status', status)
  enqueue_turn()
  return verdict
end

if click then
  local earlier = redis.call('GET', seen)
  if earlier then return earlier end
end
local verdict = settle()
if click then redis.call('SET', seen, verdict, 'EX', dedupe_ttl) end
return verdict
