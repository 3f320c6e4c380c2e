-- KEYS: lease
-- ARGV: token
-- Delete a lease (or lock) only if this token holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
