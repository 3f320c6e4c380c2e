-- KEYS: seen inbox meta queued stream sessions channel lease history injections album settings_version
-- ARGV: dedupe_ttl entry session now early channel_key media_group album_ms
-- USES: doorbell turn_job album dedupe
-- A user message: dedupe on the platform's event id, append it to the inbox and
-- enqueue a turn unless one is already queued, in one step (a message is never
-- in the inbox without a job, nor a job without its message). An album's item
-- joins its album's entry while that waits in the inbox (album.lua), and holds
-- the session's next claim for `album_ms` more.
local seen, inbox, meta, queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local stream, sessions, channel, lease = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local history, injections = KEYS[9], KEYS[10]
local dedupe_ttl, entry, session, now, early = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local channel_key, media_group, album_ms = ARGV[6], ARGV[7], tonumber(ARGV[8])
local album, settings_version = KEYS[11], KEYS[12]

if not first_delivery(seen, dedupe_ttl, true) then return {0, false} end
if media_group == '' or not join_album(inbox, entry, media_group) then
  redis.call('RPUSH', inbox, entry)
end
if media_group ~= '' and album_ms > 0 then
  redis.call('SET', album, media_group, 'PX', album_ms)
end
-- The bot was addressed here: follow-ups in this thread are answered from now on,
-- not only once the first answer is recorded.
-- `channel` names the channel set the session is in, for the prune script.
redis.call('HSET', meta, 'updated', now, 'participated', '1', 'channel', channel_key)
redis.call('HSETNX', meta, 'created', now)
-- The index is scored by last activity: idle sessions are found by score (gateway.state.retention).
redis.call('ZADD', sessions, now, session)
redis.call('ZADD', channel, now, session)

if turn_job_queued(queued, meta) then return {1, false} end

-- The base a worker may start early from (gateway.turn.early_start): only when nothing but
-- this message is waiting, no turn is running and no injection is queued. With it,
-- the version of the settings by scope as the message arrived: a worker that holds
-- an older one does not start early (gateway.turn.runner).
local payload = ''
if early == '1' and redis.call('LLEN', inbox) == 1 and redis.call('EXISTS', lease) == 0
    and redis.call('EXISTS', injections) == 0 then
  local base = (redis.call('HGET', meta, 'epoch') or '0') .. '.' .. redis.call('LLEN', history)
  local settings = redis.call('GET', settings_version) or '0'  -- an INCR's: digits
  payload = '{"base":"' .. base .. '","settings":' .. settings .. ',"entry":' .. entry .. '}'
end
return {1, add_turn_job(stream, queued, meta, session, payload)}
