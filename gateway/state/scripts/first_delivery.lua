-- KEYS: seen
-- ARGV: dedupe_ttl mark
-- USES: dedupe
-- Whether a platform event comes for the first time (dedupe.lua's rule): 1 or 0;
-- `mark` ('1' or '') marks it seen in the same step.
if first_delivery(KEYS[1], ARGV[1], ARGV[2] == '1') then return 1 end
return 0
