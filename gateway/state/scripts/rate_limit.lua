-- KEYS: user user_told conversation conversation_told
-- ARGV: user_interval_ms user_burst user_window_ms conversation_interval_ms conversation_burst conversation_window_ms
-- A message against its sender's and its conversation's token buckets, on the
-- server's clock, so every web, connection and worker process shares them. A
-- bucket holds `burst` tokens and gains one every `interval_ms`; it is kept as one
-- number, the time it is full again (GCRA), which expires when it is. A token is
-- taken from both buckets or from neither; an interval of 0 leaves a bucket out.
-- Returns {1} when the message may go on, else {0, bucket, wait_ms, tell}: the
-- bucket that refused (1 the user's, 2 the conversation's), the milliseconds until
-- it has a token, and tell = 1 the first time in its window (a mark with the
-- window's expiry), so the sender is told once per window, not once per message.
-- Both buckets carry the workspace's hash tag (a user's bucket counts per workspace),
-- so the script is single-slot on a Redis Cluster.
local now_parts = redis.call('TIME')
local now = now_parts[1] * 1000 + now_parts[2] / 1000

local taken = {}
for i = 1, 2 do
  local bucket, told = KEYS[2 * i - 1], KEYS[2 * i]
  local interval = tonumber(ARGV[3 * i - 2])
  local burst, window = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  if interval > 0 then
    local full_at = math.max(tonumber(redis.call('GET', bucket) or '0'), now) + interval
    local over = full_at - now - burst * interval
    if over > 0 then
      local tell = redis.call('SET', told, '1', 'NX', 'PX', window) and 1 or 0
      return {0, i, math.ceil(over), tell}
    end
    taken[#taken + 1] = {bucket, full_at}
  end
end
for _, take in ipairs(taken) do
  redis.call('SET', take[1], string.format('%.3f', take[2]), 'PX', math.ceil(take[2] - now))
end
return {1}
