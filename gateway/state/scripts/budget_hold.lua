-- KEYS: ...
-- ARGV: tokens usd ...
-- A model call's budget check and its hold, in one step for every worker. The keys
-- are spend hashes of one slot (a user's day and month, or a workspace's). Further
-- arguments: for each key in order, a limit, its unit ("usd" or "tokens") and the
-- key's lifetime in seconds; a limit of 0 is no budget. Each key is a spend hash:
-- `tokens` and `usd` used (added by each finished call), `held_tokens` and
-- `held_usd` held by calls in flight, `warned`.
-- Refused ({'over', i}) when the i-th budget's use and holds reach its limit; else the
-- estimate is held on every budget and {'ok', i} names the first budget found at 80%
-- or more of its limit by use that has not been warned of yet (0: none).
local tokens, usd = tonumber(ARGV[1]), tonumber(ARGV[2])

local function budget(i)
  return tonumber(ARGV[3 * i]), ARGV[1 + 3 * i], tonumber(ARGV[2 + 3 * i])
end

local warn = 0
for i, key in ipairs(KEYS) do
  local limit, unit = budget(i)
  if limit > 0 then
    local used = tonumber(redis.call('HGET', key, unit) or '0')
    local held = tonumber(redis.call('HGET', key, 'held_' .. unit) or '0')
    if used + held >= limit then
      return {'over', i}
    end
    if warn == 0 and used >= 0.8 * limit and redis.call('HEXISTS', key, 'warned') == 0 then
      warn = i
    end
  end
end
for i, key in ipairs(KEYS) do
  local limit, _, ttl = budget(i)
  if limit > 0 then
    redis.call('HINCRBYFLOAT', key, 'held_tokens', tokens)
    redis.call('HINCRBYFLOAT', key, 'held_usd', usd)
    redis.call('EXPIRE', key, ttl)
  end
end
if warn > 0 then
  redis.call('HSET', KEYS[warn], 'warned', 1)
end
return {'ok', warn}
