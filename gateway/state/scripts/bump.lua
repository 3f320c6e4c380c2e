-- KEYS: ...
-- ARGV: ops
-- Hash counters added to and their keys' lifetimes set, all in one step: what a
-- finished model call counts (gateway/spend/usage.py) and what its budgets held
-- (gateway/spend/budgets.py). `ops` is a JSON list of [kind, key, field, amount]: kind
-- 'i' adds an integer, 'f' a float, 'x' sets the key's expiry in seconds (field
-- ''); key is the index in KEYS; amounts are strings, so that Lua's numbers never
-- round an integer. As in a MULTI, one that fails (a key of the wrong type) does
-- not stop the others: the answer is {done, the first error or ''}.
local ops = cjson.decode(ARGV[1])
local done, failed = 0, ''
for _, op in ipairs(ops) do
  local kind, key, field, amount = op[1], KEYS[op[2]], op[3], op[4]
  local reply
  if kind == 'i' then
    reply = redis.pcall('HINCRBY', key, field, amount)
  elseif kind == 'f' then
    reply = redis.pcall('HINCRBYFLOAT', key, field, amount)
  else
    reply = redis.pcall('EXPIRE', key, amount)
  end
  if type(reply) == 'table' and reply.err then
    if failed == '' then failed = reply.err end
  else
    done = done + 1
  end
end
return {done, failed}
