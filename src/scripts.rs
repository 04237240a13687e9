//! The Lua scripts, sent with EVAL (one round trip, no SCRIPT LOAD dance).
//!
//! Every script takes the same KEYS, built by `lock::LockKeys`:
//!
//! | KEYS[1] | `P{K}`        | the lock: our token, expiring after the TTL   |
//! | KEYS[2] | `P{K}:holder` | hash describing the holder, same expiry       |
//! | KEYS[3] | `P{K}:fence`  | fencing counter, never expires, only grows    |
//!
//! The braces make all three one Redis Cluster slot. Results are small
//! integer arrays so that one node's answer is cheap to read.

/// Take the lock if it is free (or already ours).
///
/// ARGV: token, ttl_ms, host, pid, user, command, acquired_at.
/// Returns `{1, fence}` when held by us now, else
/// `{0, pttl_ms, host, pid, acquired_at}` describing the current holder.
pub const ACQUIRE: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local fence = redis.call('INCR', KEYS[3])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4],
    'user', ARGV[5], 'command', ARGV[6], 'acquired_at', ARGV[7], 'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, fence}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[3]) or '0')}
end
local h = redis.call('HMGET', KEYS[2], 'host', 'pid', 'acquired_at')
return {0, redis.call('PTTL', KEYS[1]), h[1] or '', h[2] or '', h[3] or ''}
"#;

/// Push the expiry of a lock we hold.
///
/// ARGV: token, ttl_ms. Returns 1 if extended, 0 if another token holds
/// the lock, -1 if the lock is gone.
pub const EXTEND: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
if cur then return 0 end
return -1
"#;

/// Delete a lock we hold and wake its waiters.
///
/// ARGV: token. Returns 1 if released, 0 if another token holds the lock
/// (it is left alone), -1 if the lock was already gone.
/// Waiters listen on the channel named like the lock key.
pub const RELEASE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', KEYS[1], 'released')
  return 1
end
if cur then return 0 end
return -1
"#;
