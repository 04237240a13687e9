//! The scripts of `status`, `list` and `force-release`: they read a
//! lock whole, or revoke it, whatever its kind (plain, semaphore, shared).

/// Read everything about a lock at once, changing nothing.
///
/// No ARGV. Returns `{token or false, pttl_ms, fence, holder, limit,
/// slots, revoked}` (revoked 1: being force-released, see FORCE_RELEASE):
/// `pttl_ms` as PTTL answers it (-2 when free), `fence` the counter's value (0 when never acquired), `holder` the hash as a flat
/// field/value array (empty when free), `limit` the semaphore's N (0 when
/// KEY is no semaphore now) and `slots` its live holders, each
/// `{token, pttl_ms, holder}`. A plain lock's reply needs only GET, PTTL
/// and HGETALL; TIME and ZRANGE only when a semaphore exists.
pub const INSPECT: &str = concat!(
    slot_lib!(),
    declare_lib!(),
    r#"
local token, pttl, fence, limit = lock_state()
-- A shared lock (see `shared.rs`) is read like a semaphore.
local shared = token == 'shared'
if limit > 0 or shared then
  local ask = declare(named(KEYS[4], KEYS[2], -1))
  if ask then return ask end
end
local revoked = 0
if token and string.sub(token, 1, 8) == 'revoked:' then
  token = string.sub(token, 9)
  revoked = 1
end
local holder = {}
if token then holder = redis.call('HGETALL', KEYS[2]) end
local slots = {}
if limit > 0 or shared then slots = live_slots(clock()) end
return {token, pttl, fence, holder, limit, slots, revoked}
"#
);

/// Delete a lock by hand, whoever holds it, and wake its waiters.
///
/// ARGV: check ('1' to delete only if the lock holds ARGV[2], '0' to
/// delete whatever holds it), token, now ('1': delete at once), by
/// (`--replace-running`: who replaces the holder, kept in its record as
/// `replaced_by` when a plain lock is revoked; '' or absent: none). Returns
/// `{outcome, token or false, pttl_ms, fence, holder, limit, slots,
/// revoked}` describing the lock as it was (see INSPECT): outcome 1
/// deleted, 2 revoked, 0 held by another token (left alone), -1 not held.
///
/// Without `now`, a plain lock held by a live holder is not deleted but
/// revoked: `P{K}` becomes `revoked:<token>` for the time the lock had
/// left (its holder's lease could not end later), so that no waiter gets
/// it before that holder has stopped, even one cut off from Redis. Its
/// EXTEND then answers -2, and its RELEASE frees the lock for the next
/// waiter at once. A semaphore's holders (with the check only the holder
/// of ARGV[2]) are revoked the same way, slot by slot: each slot's holder
/// record gets `revoked 1`, the slot keeps its place and expiry, SLOT_EXTEND
/// answers -2 and SLOT_RELEASE frees it. With `now` they are deleted at
/// once. `slots` are the holders revoked or deleted (all live holders
/// when none matched). A holder whose COMMAND has ended (its record has
/// `ended_at`: `--min-hold` keeps the lock) has nobody to stop: its lock
/// or slot is deleted at once, as with `now`.
pub const FORCE_RELEASE: &str = concat!(
    slot_lib!(),
    declare_lib!(),
    r#"
local token, pttl, fence, limit = lock_state()
-- A shared lock (see `shared.rs`): its holders are revoked slot by slot.
local shared = token == 'shared'
-- Said back as the token: `reply::inspected` reads it as the mark.
local mark = shared and 'shared' or false
if shared then token = false end
if (not token and limit > 0) or shared then
  local ask = declare(named(KEYS[4], KEYS[2], -1))
  if ask then return ask end
  local now = clock()
  local all = live_slots(now)
  if #all == 0 then return {-1, mark, pttl, fence, {}, limit, {}} end
  local chosen = all
  if ARGV[1] == '1' then
    chosen = {}
    for _, slot in ipairs(all) do
      if slot[1] == ARGV[2] then chosen[1] = slot end
    end
    if #chosen == 0 then return {0, mark, pttl, fence, {}, limit, all} end
  end
  if ARGV[3] ~= '1' then
    -- Revoke slot by slot: each keeps its place in KEYS[4] (and so its
    -- expiry) until its holder gives it back or its lease ends; SLOT_EXTEND
    -- answers -2 to a revoked slot, so it is never extended again. A slot
    -- whose job has ended (--min-hold) goes at once.
    local revoking = false
    for _, slot in ipairs(chosen) do
      local record = KEYS[2] .. ':' .. slot[1]
      if redis.call('HMGET', record, 'ended_at')[1] then
        redis.call('ZREM', KEYS[4], slot[1])
        redis.call('DEL', record)
      else
        redis.call('HSET', record, 'revoked', '1')
        revoking = true
      end
    end
    settle(now)
    if revoking then
      redis.call('PUBLISH', KEYS[1], 'revoked')
      return {2, mark, pttl, fence, {}, limit, chosen}
    end
    redis.call('PUBLISH', KEYS[1], 'released')
    return {1, mark, pttl, fence, {}, limit, chosen}
  end
  redis.call('PUBLISH', KEYS[1], 'released')
  if ARGV[1] == '1' then
    redis.call('ZREM', KEYS[4], ARGV[2])
    redis.call('DEL', KEYS[2] .. ':' .. ARGV[2])
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
    settle(now)
  else
    for _, member in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
      redis.call('DEL', KEYS[2] .. ':' .. member)
    end
    redis.call('DEL', KEYS[4], KEYS[5])
    if shared then redis.call('DEL', KEYS[1], KEYS[2]) end
  end
  return {1, mark, pttl, fence, {}, limit, chosen}
end
if not token then return {-1, false, pttl, fence, {}} end
local revoked = string.sub(token, 1, 8) == 'revoked:'
if revoked then token = string.sub(token, 9) end
local holder = redis.call('HGETALL', KEYS[2])
if ARGV[1] == '1' and token ~= ARGV[2] then
  return {0, token, pttl, fence, holder, 0, {}, revoked and 1 or 0}
end
-- Its job has ended (--min-hold keeps the lock): nobody to stop.
local ended = redis.call('HMGET', KEYS[2], 'ended_at')[1]
if ARGV[3] == '1' or (ended and not revoked) then
  redis.call('PUBLISH', KEYS[1], 'released')
  redis.call('DEL', KEYS[1], KEYS[2])
  return {1, token, pttl, fence, holder, 0, {}, 0}
end
if not revoked then
  -- Until the holder has given it back (it hears of this at once, or at
  -- its next refresh, and stops COMMAND), or until its lease could have
  -- ended: the lock's time left now. A holder cut off from Redis hears
  -- nothing, but its own deadline stops COMMAND before that. Only a lock
  -- without an expiry (set by hand) falls back to the holder's refresh
  -- period plus its kill-after.
  local px = pttl
  if px <= 0 then
    local h = redis.call('HMGET', KEYS[2], 'refresh_ms', 'kill_after_ms', 'ttl_ms')
    local ttl = tonumber(h[3]) or 30000
    px = (tonumber(h[1]) or math.ceil(ttl / 3)) + (tonumber(h[2]) or 5000)
  end
  redis.call('SET', KEYS[1], 'revoked:' .. token, 'PX', px)
  if (ARGV[4] or '') ~= '' then redis.call('HSET', KEYS[2], 'replaced_by', ARGV[4]) end
  redis.call('PEXPIRE', KEYS[2], px)
  redis.call('PUBLISH', KEYS[1], 'revoked')
end
return {2, token, pttl, fence, holder, 0, {}, revoked and 1 or 0}
"#
);
