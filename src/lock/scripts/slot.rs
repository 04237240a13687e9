//! A semaphore (`--limit N`, N > 1): the Lua functions its scripts share
//! (`slot_lib`, for INSPECT and FORCE_RELEASE too) and the `SLOT_*`
//! scripts.
//!
//! A semaphore keeps each holder in KEYS[4], scored by its expiry
//! in milliseconds by the server's own clock (`TIME`), and describes it in
//! `P{K}:holder:<token>` (KEYS[9] for the caller's own), a hash with the
//! plain holder's fields plus `fence`, expiring with the slot. Expired
//! members are removed by the scripts
//! themselves, and KEYS[4] and KEYS[5] expire with their last holder, so
//! the slot of a holder killed with SIGKILL frees itself after its TTL and
//! a semaphore whose holders all died leaves only its fence behind.
//!
//! A shared lock (`--shared`, see `shared.rs`) keeps its holders the same
//! way, and SLOT_EXTEND and SLOT_RELEASE serve its holders too.

/// Lua functions shared by the scripts that touch a semaphore. Defining
/// them calls nothing: a plain lock's INSPECT never needs `TIME`.
macro_rules! slot_lib {
    () => {
        r#"
-- Milliseconds by the server's clock: every holder's expiry is on it.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Expire the holder set and the limit with their last holder, so that a
-- semaphore whose holders all died leaves nothing behind (but its fence).
-- A shared lock's mark (KEYS[1] = 'shared', see `shared.rs`) and its
-- record go with them too.
local function settle(now)
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  local shared = redis.call('GET', KEYS[1]) == 'shared'
  if #last == 0 then
    redis.call('DEL', KEYS[4], KEYS[5])
    if shared then redis.call('DEL', KEYS[1], KEYS[2]) end
    return
  end
  local left = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', KEYS[4], left)
  redis.call('PEXPIRE', KEYS[5], left)
  if shared then
    redis.call('PEXPIRE', KEYS[1], left)
    redis.call('PEXPIRE', KEYS[2], left)
  end
end
-- The live holders, each {token, pttl_ms, holder hash as a flat array}.
local function live_slots(now)
  local members = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  local slots = {}
  for i = 1, #members, 2 do
    local left = tonumber(members[i + 1]) - now
    if left > 0 then
      slots[#slots + 1] = {members[i], left,
        redis.call('HGETALL', KEYS[2] .. ':' .. members[i])}
    end
  end
  return slots
end
-- The lock as it stands: its token, time left, fence counter and limit.
local function lock_state()
  local token = redis.call('GET', KEYS[1])
  local pttl = redis.call('PTTL', KEYS[1])
  local fence = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  local limit = tonumber(redis.call('GET', KEYS[5]) or '0') or 0
  return token, pttl, fence, limit
end
"#
    };
}

/// Take a slot of a semaphore (`--limit N`, N > 1) if one is free (or
/// already ours), removing expired holders first.
///
/// ARGV: token, ttl_ms, host, pid, user, command, acquired_at, N,
/// refresh_ms, kill_after_ms, and as ACQUIRE's: subscribed, liveness_ms,
/// floor, screen, say, label.
/// Returns `{1, fence, reset}` when we hold a slot now (see ACQUIRE); `{0, pttl_ms, '', '', '',
/// holders, N}` when all N slots are taken (the plain busy reply's layout,
/// with no single holder to name), `pttl_ms` the time until the first of
/// them expires; `{-1, N'}` when KEY is held with another limit N' (1: a plain
/// lock). Per-holder key `P{K}:holder:<token>` is built in the script.
pub const SLOT_ACQUIRE: &str = concat!(
    server_lib!(),
    eviction_lib!(),
    slot_lib!(),
    fence_lib!(),
    saying_server!(
        r#"
local refused = evicts()
if refused then return refused end
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[8])
if redis.call('GET', KEYS[1]) then return {-1, 1} end
local now = clock()
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local count = redis.call('ZCARD', KEYS[4])
local held = tonumber(redis.call('GET', KEYS[5]) or '')
if count > 0 and held and held ~= limit then return {-1, held} end
local mine = KEYS[9]
local score = redis.call('ZSCORE', KEYS[4], ARGV[1])
if score then
  if redis.call('HMGET', mine, 'revoked')[1] == '1' then
    -- Revoked from us (see FORCE_RELEASE): never renewed, busy until given back.
    return {0, tonumber(score) - now, '', '', '', count, limit}
  end
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
  redis.call('PEXPIRE', mine, ttl)
  redis.call('SET', KEYS[5], limit)
  settle(now)
  return {1, tonumber(redis.call('HMGET', mine, 'fence')[1] or '0') or 0}
end
if count >= limit then
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now, '', '', '', count, limit}
end
local fence, reset = next_fence()
redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
redis.call('DEL', mine)
redis.call('HSET', mine, 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4],
  'user', ARGV[5], 'command', ARGV[6], 'acquired_at', ARGV[7], 'ttl_ms', ARGV[2],
  'fence', fence, 'refresh_ms', ARGV[9], 'kill_after_ms', ARGV[10])
if (ARGV[16] or '') ~= '' then redis.call('HSET', mine, 'label', ARGV[16]) end
redis.call('PEXPIRE', mine, ttl)
redis.call('SET', KEYS[5], limit)
settle(now)
return {1, fence, reset}
"#
    )
);

/// Push the expiry of our slot of a semaphore.
///
/// ARGV: token, ttl_ms, ended_at (as EXTEND's). Returns 1 if extended, -1
/// if our slot is gone (expired, or deleted by hand), -2 if it was revoked
/// (see FORCE_RELEASE): a slot is never taken over, so never 0.
pub const SLOT_EXTEND: &str = concat!(
    slot_lib!(),
    r#"
local now = clock()
local score = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not score or tonumber(score) <= now then return -1 end
local record = redis.call('HMGET', KEYS[9], 'revoked', 'mode')
if record[1] == '1' then return -2 end
-- A shared holder whose lock key is no longer the shared mark (deleted
-- or revoked by hand, or by an older version): the lock is lost.
if record[2] == 'shared' and redis.call('GET', KEYS[1]) ~= 'shared' then return -1 end
local ttl = tonumber(ARGV[2])
if ARGV[3] then redis.call('HSET', KEYS[9], 'ended_at', ARGV[3]) end
redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[9], ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
settle(now)
return 1
"#
);

/// Give back our slot of a semaphore and wake its waiters; the other
/// holders are left alone.
///
/// ARGV: token. Returns 1 if released, -1 if our slot was already gone
/// (an expired one is cleaned up, without waking anyone). Waiters listen
/// on the channel named like the lock key, as for a plain lock.
pub const SLOT_RELEASE: &str = concat!(
    slot_lib!(),
    r#"
local now = clock()
local score = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not score then return -1 end
local live = tonumber(score) > now
if live then
  -- Publish first: a user without +publish then fails with NOPERM before
  -- anything is deleted. Waiters cannot act before this script ends.
  redis.call('PUBLISH', KEYS[1], 'released')
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[9])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
settle(now)
if live then return 1 end
return -1
"#
);
