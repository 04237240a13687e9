//! The line of waiters of a plain lock on one node: the Lua functions that
//! tell a live waiter (`line_lib`, for ACQUIRE and RELEASE too), and the
//! scripts that leave the line and read it.
//!
//! Waiters for a plain lock on one node queue in KEYS[6], in order of
//! arrival (or as `--queue` says, see `queue.rs`), each with a liveness
//! key `P{K}:waiters:<token>` (KEYS[8] for the caller's own), a hash `host pid user since sub` (what
//! `status` shows). A waiter is live while that key exists and, when
//! `sub` is 1, while its own wake channel `P{K}:wake:<token>` has a
//! subscriber on this server (`PUBSUB NUMSUB`): a killed waiter's
//! connection closes, so it leaves the line at once. A subscribed waiter
//! (`sub` 1) keeps its key for 60 s and refreshes it with one PEXPIRE
//! every 20-25 s, so a stopped waiter (or one on a host that died) is
//! dropped within 60 s; a waiter without a subscription that this server
//! sees (no Pub/Sub, a reconnect, no `+pubsub|numsub`) keeps the old
//! cadence: its key expires 3 s after its last try, and it tries at least
//! every second. RELEASE wakes only the first live waiter, on its own
//! channel, so a release costs one wake-up, not one per waiter, and tells
//! the second live waiter that it is next (`next`); with no live waiter
//! queued it publishes on `P{K}`, which every waiter also hears. Dead
//! waiters are dropped from the queue as RELEASE meets them.

/// Lua functions for the line of waiters (see the module doc); after
/// `server_lib`.
macro_rules! line_lib {
    () => {
        r#"
-- Whether this server sees a subscriber on the waiter's wake channel;
-- nil when it cannot tell (PUBSUB refused to the user).
local function subscribed(token)
  local n = redis.pcall('PUBSUB', 'NUMSUB', KEYS[1] .. ':wake:' .. token)
  if type(n) ~= 'table' or n.err then return nil end
  return (tonumber(n[2]) or 0) > 0
end
-- Whether a waiter's subscription is on another server than this one
-- (`at`: the run_id of the server it subscribed on): after a failover
-- or a resharding of a Cluster, or a Sentinel failover, the lock's keys
-- are here and its subscription there, and PUBSUB NUMSUB, which counts
-- this server's subscribers only, cannot see it.
local function elsewhere_sub(at)
  return at ~= nil and at ~= false and at ~= '' and at ~= this_server()
end
-- A waiter in line is live while its liveness key exists and, if it was
-- subscribed when it last tried (sub 1), while it still is (where this
-- server cannot tell, its liveness key alone says).
local function live(token)
  local alive = KEYS[6] .. ':' .. token
  -- Not given (RELEASE never asks for keys, see `calls.rs`): live while
  -- this server sees it subscribed, or cannot tell.
  if not given[alive] then return subscribed(token) ~= false end
  if redis.call('EXISTS', alive) == 0 then return false end
  -- Not a hash (an older version's '1'): live while it exists.
  local sub = redis.pcall('HMGET', alive, 'sub', 'at')
  if type(sub) ~= 'table' or sub.err or sub[1] ~= '1' then return true end
  if elsewhere_sub(sub[2]) then return true end
  return subscribed(token) ~= false
end
"#
    };
}

/// Leave the queue of waiters (given up, or stopped by a signal).
///
/// ARGV: token. Returns 1.
pub const LEAVE: &str = r#"
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('DEL', KEYS[8])
return 1
"#;

/// The live waiters of a plain lock, first in line first, changing
/// nothing (for `status` and `list`).
///
/// No ARGV. Returns `{count, waiters}`: how many live waiters stand in
/// line (of the first 1000 members), and the first 100 of them, each
/// `{token, host, pid, user, since, label, mode}` from its liveness hash (empty
/// strings for a liveness key of another form, read with `pcall`). A
/// member that is not live (see the module doc: a killed waiter at once,
/// a stopped one once its liveness key has expired) is not counted.
pub const WAITERS: &str = concat!(
    declare_lib!(),
    server_lib!(),
    line_lib!(),
    r#"
local ask = declare(named(KEYS[6], KEYS[6], 999))
if ask then return ask end
local count, shown = 0, {}
for _, token in ipairs(redis.call('ZRANGE', KEYS[6], 0, 999)) do
  local alive = KEYS[6] .. ':' .. token
  if live(token) then
    count = count + 1
    if #shown < 100 then
      -- Not a hash (an older version's '1'): a waiter without details.
      local h = redis.pcall('HMGET', alive, 'host', 'pid', 'user', 'since', 'label', 'mode')
      if type(h) ~= 'table' or h.err then h = {} end
      shown[#shown + 1] = {token, h[1] or '', h[2] or '', h[3] or '', h[4] or '', h[5] or '',
        h[6] or ''}
    end
  end
end
return {count, shown}
"#
);
