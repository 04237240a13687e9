//! A shared lock (`--shared`): the Lua functions ACQUIRE uses for it
//! (with ARGV[20] = '1'). SLOT_EXTEND and SLOT_RELEASE serve its holders
//! (see `slot.rs`); INSPECT and FORCE_RELEASE read it like a semaphore.
//!
//! While any shared holder lives, the lock key KEYS[1] holds the mark
//! `shared` (no token is ever that word), expiring with the last holder,
//! and KEYS[2] describes the newest of them with `mode shared`. So an
//! exclusive run, of this version or an older one, finds the lock held
//! (`SET NX` fails) and waits or gives up as for any holder. Each shared
//! holder has a slot as a semaphore's holder has: its token in KEYS[4],
//! scored by its expiry, and its record `P{K}:holder:<token>` (KEYS[9])
//! with its own `fence` and `mode shared`; KEYS[5] (a semaphore's limit)
//! is never written, so `--limit N` runs and shared ones refuse each
//! other's key as they refuse any other limit.
//!
//! Waiters of both kinds stand in one line (one server); a shared
//! waiter's liveness hash says `mode shared`. A shared run takes the lock
//! when it is free or held shared and no live exclusive waiter stands
//! before it (a newcomer: anywhere in the line): a waiting exclusive run
//! is not starved by shared runs that arrive after it, whatever `--queue`
//! says, but for newest-wins, where a newcomer replaces every waiter.
//! A shared waiter that takes the lock from the line wakes the next live
//! waiter if that one is shared too, so a run of shared waiters behind a
//! released exclusive lock all go.
//!
//! ARGV[20] = '3' is a shared run that saw a holder: should its take
//! start the fence counter anew (Redis lost its data under that holder),
//! it takes the lock exclusively, as the stand-in for the lost lease (see
//! `wait.rs`), and its next try turns the stand-in into a shared hold.

/// Lua functions for a shared acquire; after `slot_lib`, `fence_lib` and
/// `line_lib` (whose `live` needs the waiters' liveness keys declared).
macro_rules! shared_lib {
    () => {
        r#"
local shared = ARGV[20] == '1' or ARGV[20] == '3'
-- '3': a shared waiter that saw a holder (see `take_shared`).
local stands_in = ARGV[20] == '3'
-- Whether a waiter in line waits for a shared lock (an older version's
-- waiters, whose liveness key may be no hash, wait exclusively).
local function waits_shared(w)
  local mark = KEYS[6] .. ':' .. w
  if not given[mark] then return false end
  local mode = redis.pcall('HMGET', mark, 'mode')
  return type(mode) == 'table' and mode[1] == 'shared'
end
-- The first live exclusive waiter before us (a newcomer: in the whole
-- line, of its first 100), or false.
local function exclusive_ahead()
  for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, 99)) do
    if w == ARGV[1] then return false end
    if not waits_shared(w) and live(w) then return w end
  end
  return false
end
-- Whether the lock is free for a shared holder: free, or held shared and
-- not revoked from us.
local function shared_free()
  local cur = redis.call('GET', KEYS[1])
  -- Our own stand-in (see `take_shared`): ours to turn into a shared hold.
  if cur == ARGV[1] then return true end
  if cur and cur ~= 'shared' then return false end
  if cur and redis.call('HMGET', KEYS[9], 'revoked')[1] == '1' then return false end
  return true
end
-- After taking the lock from the line: wake the next live waiter if it
-- waits for a shared lock too.
local function wake_next_shared()
  for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, 99)) do
    if w ~= ARGV[1] and live(w) then
      if waits_shared(w) then redis.call('PUBLISH', KEYS[1] .. ':wake:' .. w, 'released') end
      return
    end
  end
end
-- ARGV[20] = '2', an exclusive waiter without a line (Redlock): while
-- the lock is held shared (or once marked), stand in line without a
-- subscription this server sees (3 s, renewed by each try), so that
-- shared newcomers wait behind us. Such a waiter takes a fresh token
-- for each try: the marks of its earlier tokens lapse with their keys,
-- are dropped here, and the line goes 3 s after the last mark.
local function mark_writer(cur)
  if cur ~= 'shared' and redis.call('EXISTS', KEYS[8]) == 0 then return end
  for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, 99)) do
    local mark = KEYS[6] .. ':' .. w
    if given[mark] and redis.call('EXISTS', mark) == 0 then redis.call('ZREM', KEYS[6], w) end
  end
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  local score = 1
  if #last > 0 then score = tonumber(last[2]) + 1 end
  redis.call('ZADD', KEYS[6], 'NX', score, ARGV[1])
  redis.call('PEXPIRE', KEYS[6], 3000)
  redis.call('HSET', KEYS[8], 'host', ARGV[3], 'pid', ARGV[4], 'user', ARGV[5],
    'since', ARGV[7], 'sub', '0')
  redis.call('PEXPIRE', KEYS[8], 3000)
end
local function unmark_writer()
  redis.call('ZREM', KEYS[6], ARGV[1])
  redis.call('DEL', KEYS[8])
end
-- How many shared holders live (ZRANGE only: no semaphore's rights needed
-- by an exclusive run that finds the lock held shared).
local function shared_holders()
  local now, n = clock(), 0
  local members = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  for i = 2, #members, 2 do
    if tonumber(members[i]) > now then n = n + 1 end
  end
  return n
end
-- Take (or renew) our shared slot: `{1, fence, reset}`.
local function take_shared()
  local now = clock()
  local ttl = tonumber(ARGV[2])
  local mine = KEYS[9]
  if stands_in and redis.call('GET', KEYS[1]) == ARGV[1] then
    -- Our stand-in (below) already, and we have not waited it out: a try
    -- of ours made it and its answer was lost (F23). It stays one, and
    -- its record says again that its grant started the counter.
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
    local reset = 0
    if redis.call('HMGET', KEYS[2], 'reset')[1] == '1' then reset = 1 end
    return {1, tonumber(redis.call('GET', KEYS[3]) or '0'), reset}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZSCORE', KEYS[4], ARGV[1]) then
    redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
    redis.call('PEXPIRE', mine, ttl)
    settle(now)
    return {1, tonumber(redis.call('HMGET', mine, 'fence')[1] or '0') or 0, 0}
  end
  local fence, reset = next_fence()
  local fields = {'host', ARGV[3], 'pid', ARGV[4], 'user', ARGV[5], 'command', ARGV[6],
    'acquired_at', ARGV[7], 'ttl_ms', ARGV[2], 'refresh_ms', ARGV[9],
    'kill_after_ms', ARGV[10]}
  if (ARGV[16] or '') ~= '' then
    fields[#fields + 1] = 'label'
    fields[#fields + 1] = ARGV[16]
  end
  if reset == 1 and stands_in and redis.call('EXISTS', KEYS[1]) == 0 then
    -- The counter starts anew under a waiter that saw a holder: Redis
    -- lost its data under that holder, whose job may run on until its
    -- next refresh. The waiter stands in for its lease (`wait.rs`), and
    -- a shared stand-in would let every other shared waiter in beside it
    -- (their own tries see no loss: the chaos campaign's F16). So the
    -- lock is held by our token alone, as an exclusive holder's, until
    -- our next try turns it into a shared hold (`shared_free`).
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
    redis.call('DEL', KEYS[2])
    redis.call('HSET', KEYS[2], 'token', ARGV[1], 'reset', '1', unpack(fields))
    redis.call('PEXPIRE', KEYS[2], ttl)
    return {1, fence, reset}
  end
  fields[#fields + 1] = 'mode'
  fields[#fields + 1] = 'shared'
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
  redis.call('DEL', mine, KEYS[2])
  redis.call('HSET', mine, 'token', ARGV[1], 'fence', fence, unpack(fields))
  redis.call('PEXPIRE', mine, ttl)
  redis.call('HSET', KEYS[2], 'token', 'shared', unpack(fields))
  redis.call('SET', KEYS[1], 'shared')
  settle(now)
  return {1, fence, reset}
end
"#
    };
}
