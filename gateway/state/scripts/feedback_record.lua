-- KEYS: reply log metrics
-- ARGV: user value now keep_ms
-- One click on a reply's feedback button, in one step: the clicker's vote on the
-- reply (one per user and reply), its entry in the log `gateway feedback` reads,
-- and the /metrics counter of its platform, workspace, model and value. A click
-- with the other value moves the vote: its old counter down, the new one up, its
-- old log entry replaced. The same value again changes nothing, nor does a click
-- on a message that is not a registered reply (never, or expired), nor a value
-- other than up or down. Log entries older than `keep_ms` are dropped on the way.
-- Returns recorded, changed, unchanged, unknown or invalid.
local reply, log, metrics = KEYS[1], KEYS[2], KEYS[3]
local user, value = ARGV[1], ARGV[2]
local now, keep_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
if value ~= 'up' and value ~= 'down' then return 'invalid' end
local known = redis.call(
  'HMGET', reply, 'session', 'turn', 'model', 'platform', 'workspace', 'channel', 'message')
if not known[1] then return 'unknown' end

-- The model comes last: a model's name may hold the separator.
local function counter(vote)
  return table.concat({'feedback', vote.platform, vote.workspace, vote.value, vote.model}, '|')
end

local field = 'vote:' .. user
local before = redis.call('HGET', reply, field)
local verdict = 'recorded'
if before then
  local old = cjson.decode(before)
  if old.value == value then return 'unchanged' end
  redis.call('HINCRBY', metrics, counter(old), -1)
  redis.call('ZREM', log, before)
  verdict = 'changed'
end
local new = {
  at = now, session = known[1], turn = known[2], model = known[3], platform = known[4],
  workspace = known[5], channel = known[6], message = known[7], user = user, value = value,
}
local vote = cjson.encode(new)
redis.call('HINCRBY', metrics, counter(new), 1)
redis.call('HSET', reply, field, vote)
redis.call('ZADD', log, now, vote)
redis.call('ZREMRANGEBYSCORE', log, '-inf', '(' .. (now - keep_ms))
return verdict
