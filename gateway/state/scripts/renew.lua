-- KEYS: lease
-- ARGV: token ttl_ms
-- Extend a lease this token holds; 0 when another token holds it or it expired.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
