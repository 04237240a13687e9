//! The Lua scripts: each call one round trip, by its digest (EVALSHA), its
//! text (EVAL) only where the server lacks it (see `wire.rs`).
//!
//! Every script takes the same KEYS, and each its own ARGV: the table of
//! both is in `calls.rs`, which builds them from named fields. Every key
//! a script touches is in its KEYS (managed servers refuse any other):
//! the caller's own records by name, other clients' records when the
//! script asks for them (`declare_lib`, see `calls.rs`).
//!
//! The braces make them all one Redis Cluster slot. Results are small
//! integer arrays so that one node's answer is cheap to read.
//!
//! A plain lock (`--limit 1`) uses KEYS[1..3] only; it reads KEYS[5] to
//! refuse a key that is a semaphore now. A semaphore's scripts are in
//! `slot.rs`, the line of waiters' in `line.rs`.
//!
//! Acquire replies `{-1, N}` when KEY is in use with another limit (N = 1:
//! a plain lock); nothing is changed then.
//!
//! Waiters for a plain lock on one node stand in a line (see `line.rs`):
//! RELEASE wakes only the first live waiter, on its own channel, and
//! tells the second that it is next; a waiter that takes the lock by a
//! try of its own tells the next one too.

/// Keys named after other clients' tokens (see `calls.rs`): a script
/// lists every one it will touch before it writes anything, and one
/// missing from its KEYS makes it answer `{-99, names}`, changing nothing.
macro_rules! declare_lib {
    () => {
        r#"
local given = {}
for _, k in ipairs(KEYS) do given[k] = true end
-- {-99, names} when one of `names` is not in KEYS, else nil.
local function declare(names)
  for _, k in ipairs(names) do
    if not given[k] then return {-99, names} end
  end
  return nil
end
-- `base:member` for the members of a sorted set, from the first to `stop`.
local function named(zset, base, stop)
  local names = {}
  for _, member in ipairs(redis.call('ZRANGE', zset, 0, stop)) do
    names[#names + 1] = base .. ':' .. member
  end
  return names
end
"#
    };
}

/// This server's `run_id`, which tells one server from another whatever
/// address or socket reached it: for a waiter subscribed elsewhere
/// (`line_lib`), and the server that gave an acquire's answer.
macro_rules! server_lib {
    () => {
        r#"
-- This server's run_id (INFO server, once per script; '' when refused).
local here = nil
local function this_server()
  if here == nil then
    local info = redis.pcall('INFO', 'server')
    -- A plain search, then a match anchored there: a pattern tried at
    -- every offset of INFO's text costs the server more than INFO itself.
    local at = type(info) == 'string' and string.find(info, '\nrun_id:', 1, true)
    here = at and string.match(info, '^%w+', at + 8) or ''
  end
  return here
end
"#
    };
}

/// An acquire script's body, run as a function so that with ARGV[15] =
/// '1' (a Redlock run) every answer says which server gave it:
/// `{answer, run_id}` (`''` when `INFO server` is refused or has none),
/// and the caller refuses two nodes that are one server before it counts
/// them (`lock::redlock`). An ask for keys (`{-99, names}`) goes as it
/// is: its answer, sent again with them, says. One node never asks.
macro_rules! saying_server {
    ($body:literal) => {
        concat!(
            "local function answer()\n",
            $body,
            r#"
end
local reply = answer()
if ARGV[15] ~= '1' or reply[1] == -99 then return reply end
return {reply, this_server()}
"#
        )
    };
}

/// With ARGV[14] = '1', the acquire scripts first (`evicts()`) refuse a server that may
/// evict the lock's key (the eviction check of `Node::check_eviction`,
/// made here so that it costs no round trip of its own), before anything
/// is written: `{-3, maxmemory, policy}` when `maxmemory` is set (not 0)
/// with a `maxmemory-policy` other than `noeviction`, `{-4, error}` when
/// `INFO memory` is refused (no `+info`, renamed away): the caller notes
/// that and asks again without the check. A server that does not say is
/// taken at its word, as in `Node::check_eviction`.
macro_rules! eviction_lib {
    () => {
        r#"
local function evicts()
  if ARGV[14] ~= '1' then return nil end
  local info = redis.pcall('INFO', 'memory')
  if type(info) ~= 'string' then
    if type(info) == 'table' and info.err then return {-4, info.err} end
    return {-4, 'INFO memory gave no text'}
  end
  -- No limit, or no eviction: plain searches first (a pattern tried at
  -- every offset of the text costs the server more than INFO itself).
  if string.find(info, '\nmaxmemory:0\r', 1, true)
    or string.find(info, '\nmaxmemory_policy:noeviction\r', 1, true) then
    return nil
  end
  local maxmemory = string.match(info, '\nmaxmemory:(%d+)')
  local policy = string.match(info, '\nmaxmemory_policy:([^\r\n]+)')
  if maxmemory and policy and maxmemory ~= '0' and policy ~= 'noeviction' then
    return {-3, maxmemory, policy}
  end
  return nil
end
"#
    };
}

/// The next fence, and whether the counter had to be seeded. A missing
/// counter (a restart without persistence, FLUSHALL) starts from the
/// server's clock in microseconds, so that the fence never repeats or
/// goes back: that is larger than any count of acquisitions since 1970.
/// With `floor` (ARGV[13] = '1': one endpoint, not Redlock) the fence is
/// also never below that clock: a counter a failover set back (the
/// promoted replica had not seen the last acquisitions, which were made
/// before the failover, so below the new primary's clock) jumps to it, and
/// no fence handed out before is handed out again.
macro_rules! fence_lib {
    () => {
        r#"
local function next_fence()
  if redis.call('EXISTS', KEYS[3]) == 0 then
    local t = redis.call('TIME')
    redis.call('SET', KEYS[3], t[1] .. string.format('%06d', tonumber(t[2])))
    return redis.call('INCR', KEYS[3]), 1
  end
  local n = redis.call('INCR', KEYS[3])
  if ARGV[13] == '1' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if n < now then
      redis.call('SET', KEYS[3], t[1] .. string.format('%06d', tonumber(t[2])))
      return now, 0
    end
  end
  return n, 0
end
"#
    };
}

// After the libraries they use, before the scripts that use theirs.
#[macro_use]
mod line;
#[macro_use]
mod slot;
#[macro_use]
mod shared;
mod admin;

pub use admin::{FORCE_RELEASE, INSPECT};
pub use line::{LEAVE, WAITERS};
pub use slot::{SLOT_ACQUIRE, SLOT_EXTEND, SLOT_RELEASE};

/// Every script of this build, with the feature it serves (named in the
/// refusal of a server that will not run scripts).
pub const ALL: [(&str, &str); 11] = [
    (ACQUIRE, "plain lock (taking it)"),
    (EXTEND, "plain lock (refreshing it)"),
    (RELEASE, "plain lock (releasing it)"),
    (LEAVE, "line of waiters (--queue)"),
    (WAITERS, "line of waiters (status)"),
    (INSPECT, "status and list"),
    (FORCE_RELEASE, "force-release"),
    (SLOT_ACQUIRE, "semaphore (--limit)"),
    (SLOT_EXTEND, "semaphore (--limit)"),
    (SLOT_RELEASE, "semaphore (--limit)"),
    (RAISE_FENCE, "Redlock fence (several --redis)"),
];

/// Take the lock if it is free (or already ours).
///
/// ARGV: token, ttl_ms, host, pid, user, command, acquired_at, queue,
/// refresh_ms, kill_after_ms (the holder's, kept in its record for
/// FORCE_RELEASE), subscribed, liveness_ms, floor (see `fence_lib`),
/// screen (see `eviction_lib`), say ('1': say which server answers, see
/// `saying_server`), label (kept in
/// the holder record and a waiter's liveness hash when not empty), at (in
/// line and subscribed behind sentinels or on a Cluster: the `run_id` of
/// the server subscribed on, kept in the liveness hash; see `line_lib`'s
/// `elsewhere_sub`), queue_max (`--queue-max`, '0': unbounded; absent
/// from an older caller: unbounded), hold_reason (`redlock-run hold`;
/// '' or absent: a run; a hold's record also gets `hold_until`, this
/// server's clock in ms plus the TTL, and `ended_at`). With queue = '1' the caller
/// waits in line: a busy answer puts it at the end of the queue (score:
/// the last score + 1, so the order is the server's order of arrival,
/// whatever the waiters' clocks say) and marks it alive (its liveness
/// hash; `since` is ARGV[7], when it began to wait); taking the lock
/// takes it out, and tells the next live waiter (`next` on its wake
/// channel) that it is first now. With subscribed = '1' (it listens on its wake channel)
/// and a subscription this server sees, its liveness key lasts
/// liveness_ms and says `sub 1`; else 3 s (see the module doc). queue =
/// '2' (newest-first) puts a
/// new waiter at the front (the first score - 1); '3' (newest-wins) makes
/// it the only one: every older live waiter is taken out of the line, its
/// liveness hash becomes `replaced_by_host replaced_by_pid` for 60 s, and
/// it is woken on its own channel; its next try answers `{-2, host, pid}`
/// (replaced by that waiter) and never takes the lock (a newcomer that
/// takes a free lock at once replaces them too: queue = '4', a newest-wins
/// run's first try). Every newest-wins run joining the line ('5', its
/// first try in line; then as '3'), or taking a free lock at once ('4')
/// where such a record exists, records itself as the newest arrival in
/// `P{K}:waiters:newest` (token, host, pid; 7 days); a try in line ('3')
/// by any other run answers
/// `{-2, host, pid}` of the newest, whatever became of its mark (it lapses
/// after 60 s: a waiter stopped longer would otherwise come back as a
/// newcomer and replace the newer one). A waiter in line takes a
/// free lock only when no live waiter stands before it (one of the first
/// 100), so the line's order holds even against a waiter whose fallback
/// poll comes first; a newcomer of '2' or '3' stands before them all.
/// ARGV[20] (see `shared.rs`): '1' takes the lock shared (a shared
/// waiter's liveness hash says `mode shared`, and newest-first is
/// oldest-first for it), '2' is an exclusive waiter without a line
/// (Redlock) that marks its place while the lock is held shared, '3' a
/// shared run that saw a holder (a counter started anew makes its take an
/// exclusive stand-in, see `shared.rs`).
/// Returns `{1, fence, reset}` when held by us now (reset 1: the fence
/// counter was seeded, see `fence_lib`), else
/// `{0, pttl_ms, host, pid, acquired_at, holders, of, revoked, first, line,
/// ahead_ms, seen, user, label, hold_reason, counted}` describing the current holder (held
/// shared: `holders` live shared holders and `of` -1, the newest of them
/// described; else both 0) (revoked 1: it is being
/// force-released) and, in line, where we stand: first 1 when no live
/// waiter stands before us, line the members of the queue (live or not;
/// from the span of its scores, so also counting those that left from
/// the middle),
/// ahead_ms, when the lock is free, the time left on the liveness key of
/// the first live waiter before us (-1: none, or the lock is held), seen 1 when this server sees our subscription
/// (0: it does not, -1: it cannot tell), counted 1 when the fence counter
/// exists (a lock this tool granted, not one set by hand); `{-1, N}` when KEY is a
/// semaphore with `--limit N` now, or `{-2, host, pid}`; `{-5, waiting}`
/// when queue = '1' or '2', queue_max > 0, we are not in line yet and at
/// least queue_max live waiters are (every member looked at: all are
/// declared then): the line is full, and nothing was written
/// (newest-wins is never full: a newcomer replaces every older waiter).
pub const ACQUIRE: &str = concat!(
    server_lib!(),
    eviction_lib!(),
    fence_lib!(),
    declare_lib!(),
    line_lib!(),
    slot_lib!(),
    shared_lib!(),
    saying_server!(
        r#"
local refused = evicts()
if refused then return refused end
local limit = redis.call('GET', KEYS[5])
if limit then return {-1, tonumber(limit) or 0} end
local mode = ARGV[8]
-- newest-wins: '4' is a run's first try (not in line), '5' its first
-- try in line; both make it the newest arrival.
local first_try, arriving = mode == '4', mode == '5'
if first_try then mode = '0' elseif arriving then mode = '3' end
-- A shared waiter never stands before a live exclusive one (see
-- `shared.rs`), and shared waiters go together: newest-first is oldest-first.
if shared and mode == '2' then mode = '1' end
local queued = mode == '1' or mode == '2' or mode == '3'
-- --queue-max (0: unbounded); newest-wins keeps one waiter anyway.
local max = tonumber(ARGV[18] or '0') or 0
local joining = max > 0 and (mode == '1' or mode == '2')
if joining then
  -- Only a newcomer is bounded: a waiter already in line keeps its place.
  for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
    if w == ARGV[1] then
      joining = false
      break
    end
  end
end
local alive = KEYS[8]
local newest = KEYS[7]
if queued or first_try or shared or ARGV[20] == '2' then
  -- The liveness hashes of the waiters it may look at (the first 100),
  -- or replace (all of them: newest-wins).
  local stop = 99
  if mode == '3' or first_try or joining then stop = -1 end
  local ask = declare(named(KEYS[6], KEYS[6], stop))
  if ask then return ask end
end
local function arrive()
  redis.call('HSET', newest, 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4])
  redis.call('PEXPIRE', newest, 604800000)
end
-- newest-wins: every other waiter leaves the line, told by whom.
local function replace_others()
  for _, old in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
    if old ~= ARGV[1] then
      local mark = KEYS[6] .. ':' .. old
      if redis.call('EXISTS', mark) == 1 then
        redis.call('DEL', mark)
        redis.call('HSET', mark, 'replaced_by_host', ARGV[3], 'replaced_by_pid', ARGV[4])
        redis.call('PEXPIRE', mark, 60000)
        redis.call('PUBLISH', KEYS[1] .. ':wake:' .. old, 'replaced')
      end
      redis.call('ZREM', KEYS[6], old)
    end
  end
end
if arriving then
  arrive()
elseif mode == '3' then
  -- A newer run arrived since we did (our mark may have lapsed while we
  -- were stopped): we are replaced, whatever the line says now.
  local n = redis.call('HMGET', newest, 'token', 'host', 'pid')
  if n[1] and n[1] ~= ARGV[1] then
    redis.call('ZREM', KEYS[6], ARGV[1])
    redis.call('DEL', alive)
    return {-2, n[2] or '', n[3] or ''}
  end
end
local ahead, found = false, false
if queued then
  -- Our own liveness key: always a hash (written below).
  local by = redis.call('HMGET', alive, 'replaced_by_host', 'replaced_by_pid')
  if by[2] then
    redis.call('DEL', alive)
    return {-2, by[1] or '', by[2]}
  end
  -- A free lock is not ours while a live waiter stands before us.
  for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, 99)) do
    if w == ARGV[1] then
      found = true
      break
    end
    if not ahead and live(w) then
      ahead = w
      if mode == '1' then break end
    end
  end
  -- A newcomer of newest-first or newest-wins goes before them all.
  if not found and mode ~= '1' then ahead = false end
end
-- A shared run never passes a live exclusive waiter (but newest-wins).
if shared and not ((mode == '3' and not found) or first_try) then ahead = exclusive_ahead() end
local took = false
if not ahead then
  if shared then
    took = shared_free()
  else
    took = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  end
end
if took then
  if queued then
    if mode == '3' and not found then replace_others() end
    redis.call('ZREM', KEYS[6], ARGV[1])
    redis.call('DEL', alive)
    -- Taken from the line by a try of our own (the holder left it without
    -- a release): tell the next live waiter it is first now, as RELEASE
    -- does, so that it watches our lease (else it learns of its end at
    -- its slow pace: the chaos campaign, seed 20261206 episode 319).
    for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, 99)) do
      if live(w) then
        redis.call('PUBLISH', KEYS[1] .. ':wake:' .. w, 'next')
        break
      end
    end
  elseif first_try then
    -- A newcomer that finds the lock free runs first: the older waiters
    -- are replaced, not served after it. No record of a newest arrival:
    -- no newest-wins run waited here lately, so none can come back.
    if redis.call('EXISTS', newest) == 1 then arrive() end
    replace_others()
  end
  if shared then
    if queued then wake_next_shared() end
    return take_shared()
  end
  if ARGV[20] == '2' then unmark_writer() end
  local fence, reset = next_fence()
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4],
    'user', ARGV[5], 'command', ARGV[6], 'acquired_at', ARGV[7], 'ttl_ms', ARGV[2],
    'refresh_ms', ARGV[9], 'kill_after_ms', ARGV[10])
  if (ARGV[16] or '') ~= '' then redis.call('HSET', KEYS[2], 'label', ARGV[16]) end
  if (ARGV[19] or '') ~= '' then
    -- A hold: its reason, its end by this server's clock (ms), and no
    -- job to stop (`ended_at`), so that a force-release deletes it at once.
    local t = redis.call('TIME')
    local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
    redis.call('HSET', KEYS[2], 'hold_reason', ARGV[19], 'hold_until',
      string.format('%.0f', ends), 'ended_at', ARGV[7])
  end
  -- A grant that started the counter says so in its record: a try whose
  -- answer was lost (timed out) is told again by the next (below).
  if reset == 1 then redis.call('HSET', KEYS[2], 'reset', '1') end
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {1, fence, reset}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  -- Ours already: a try of ours took it, and its answer may have been
  -- lost (the chaos campaign, seed 20261209 episode 822; F23). Whether
  -- that grant started the fence counter is said again.
  local reset = 0
  if redis.call('HMGET', KEYS[2], 'reset')[1] == '1' then reset = 1 end
  return {1, tonumber(redis.call('GET', KEYS[3]) or '0'), reset}
end
local first, line, ahead_ms, seen = 0, 0, -1, 0
if joining then
  -- A newcomer to a full line: not added, nothing written.
  local waiting = 0
  for _, w in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
    if live(w) then waiting = waiting + 1 end
  end
  if waiting >= max then return {-5, waiting} end
end
if queued then
  local score = 1
  if mode == '2' then
    local head = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
    if #head > 0 then score = tonumber(head[2]) - 1 end
  else
    local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
    if #last > 0 then score = tonumber(last[2]) + 1 end
  end
  local added = redis.call('ZADD', KEYS[6], 'NX', score, ARGV[1])
  if added == 1 and mode == '3' then replace_others() end
  -- A line whose waiters all died goes with the last liveness key that
  -- its last try wrote, at most 60 s later (subscribed waiters try seldom,
  -- but the line as a whole about once a second, and a line of one every
  -- 5-10 s, see `wait.rs`). A failover can lose a leaving waiter's ZREM
  -- (the old primary took it), so this bounds what a dead line leaves.
  redis.call('PEXPIRE', KEYS[6], math.max(tonumber(ARGV[12]) or 0, 60000))
  local ms, sub_flag = 3000, 0
  if ARGV[11] == '1' then
    local sub = subscribed(ARGV[1])
    if sub then seen, ms = 1, tonumber(ARGV[12]) or 60000 elseif sub == nil then seen = -1 end
    -- Subscribed on another server (see `elsewhere_sub`): it keeps its
    -- place by its liveness key, and is told (seen 0) to subscribe here.
    if not sub and elsewhere_sub(ARGV[17]) then ms, sub_flag = tonumber(ARGV[12]) or 60000, 1 end
  end
  redis.call('HSET', alive, 'host', ARGV[3], 'pid', ARGV[4], 'user', ARGV[5], 'since', ARGV[7],
    'sub', tostring(math.max(seen, sub_flag)), 'at', ARGV[17] or '')
  if (ARGV[16] or '') ~= '' then redis.call('HSET', alive, 'label', ARGV[16]) end
  if shared then redis.call('HSET', alive, 'mode', 'shared') end
  redis.call('PEXPIRE', alive, ms)
  if not ahead then first = 1 end
  -- The members, from the scores (ZCARD is no plain lock's permission):
  -- consecutive, but for those that left from the middle of the line.
  local head = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
  local tail = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  line = tonumber(tail[2]) - tonumber(head[2]) + 1
end
local h = redis.call('HMGET', KEYS[2], 'host', 'pid', 'acquired_at', 'user', 'label', 'hold_reason')
local cur = redis.call('GET', KEYS[1]) or ''
if ARGV[20] == '2' then mark_writer(cur) end
-- Free, but not ours: when will the live waiter before us lapse?
if ahead and cur == '' then ahead_ms = redis.call('PTTL', KEYS[6] .. ':' .. ahead) end
local revoked = 0
if string.sub(cur, 1, 8) == 'revoked:' then revoked = 1 end
-- Held shared: how many hold it (limit -1 says so; see `shared.rs`).
local holders, of = 0, 0
if cur == 'shared' then holders, of = shared_holders(), -1 end
return {0, redis.call('PTTL', KEYS[1]), h[1] or '', h[2] or '', h[3] or '', holders, of, revoked,
  first, line, ahead_ms, seen, h[4] or '', h[5] or '', h[6] or '', redis.call('EXISTS', KEYS[3])}
"#
    )
);

/// Push the expiry of a lock we hold.
///
/// ARGV: token, ttl_ms, and after COMMAND ended (`--min-hold` keeps the
/// lock) when it ended: written to the holder record as `ended_at`, so
/// that status says so and force-release frees it at once. Returns 1 if
/// extended, 0 if another token holds the lock, -1 if the lock is gone,
/// -2 if it was force-released from us (revoked: the holder must stop
/// COMMAND, then release).
pub const EXTEND: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  if ARGV[3] then redis.call('HSET', KEYS[2], 'ended_at', ARGV[3]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
if cur == 'revoked:' .. ARGV[1] then return -2 end
if cur then return 0 end
return -1
"#;

/// Delete a lock we hold and wake the next waiter (see the module doc),
/// telling it the line's keys (`released NAME...`: its acquire declares
/// them, see `channels.rs`);
/// with waiters in line, also say so on `P{K}:free` for `wait KEY`, and
/// tell the second live waiter that it is next (it looks again soon, in
/// case the first does not come: stopped, or just killed).
///
/// ARGV: token, how ('1': quietly, a failed Redlock attempt's give-back
/// that wakes no one; '2': also wake the waiters where the lock was not
/// ours, a Redlock holder's release). Returns 1 if released, 0 if another
/// token holds the lock (it is left alone), -1 if the lock was already gone. A lock revoked
/// from us (see FORCE_RELEASE) is released the same way: its holder has
/// stopped, the next waiter may go.
pub const RELEASE: &str = concat!(
    declare_lib!(),
    server_lib!(),
    line_lib!(),
    r#"
local cur = redis.call('GET', KEYS[1])
if (cur == ARGV[1] or cur == 'revoked:' .. ARGV[1]) and ARGV[2] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
if cur == ARGV[1] or cur == 'revoked:' .. ARGV[1] then
  local channel, next_up = KEYS[1], nil
  local line = redis.call('ZRANGE', KEYS[6], 0, 99)
  for _, waiter in ipairs(line) do
    if live(waiter) then
      if channel ~= KEYS[1] then
        next_up = KEYS[1] .. ':wake:' .. waiter
        break
      end
      channel = KEYS[1] .. ':wake:' .. waiter
    elseif channel == KEYS[1] and given[KEYS[6] .. ':' .. waiter]
      and redis.call('EXISTS', KEYS[6] .. ':' .. waiter) == 0 then
      -- Dead for good (a waiter only unsubscribed keeps its place).
      redis.call('ZREM', KEYS[6], waiter)
    end
  end
  -- Publish first: a user without +publish then fails with NOPERM before
  -- anything is deleted. Waiters cannot act before this script ends.
  if channel == KEYS[1] then
    redis.call('PUBLISH', channel, 'released')
  else
    -- The waiter woken gets the line's keys, which its acquire declares
    -- (see `declare_lib`): no round trip to be asked for them.
    local names = {'released'}
    for i, waiter in ipairs(line) do names[i + 1] = KEYS[6] .. ':' .. waiter end
    redis.call('PUBLISH', channel, table.concat(names, ' '))
  end
  -- `wait KEY` listens on P{K}, which a waiter's wake-up skips.
  if channel ~= KEYS[1] then redis.call('PUBLISH', KEYS[1] .. ':free', 'released') end
  if next_up then redis.call('PUBLISH', next_up, 'next') end
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
-- A Redlock holder's release: wake the waiters here even where the lock
-- was not ours (they listen on the first node, which it may not have had).
if ARGV[2] == '2' then redis.call('PUBLISH', KEYS[1], 'released') end
if cur then return 0 end
return -1
"#
);

/// Redlock: raise the fence counter to the fence a majority handed out,
/// on a node that granted us the lock, so that every later majority
/// (which shares a node with ours) counts on from above it.
///
/// ARGV: token, fence (a decimal integer), limit (1: a plain lock).
/// Returns 1 when the node still holds our lock (or slot) and its counter
/// is now at least `fence` (a semaphore's holder record then carries
/// `fence`), 0 when it does not hold it (nothing changed). Counters are
/// compared as decimal strings (length, then digits), never as Lua
/// numbers, whose doubles are exact only up to 2^53.
pub const RAISE_FENCE: &str = r#"
local ours
if ARGV[3] == '1' then
  ours = redis.call('GET', KEYS[1]) == ARGV[1]
else
  ours = redis.call('ZSCORE', KEYS[4], ARGV[1]) ~= false
end
if not ours then return 0 end
local cur = redis.call('GET', KEYS[3]) or '0'
if #cur < #ARGV[2] or (#cur == #ARGV[2] and cur < ARGV[2]) then
  redis.call('SET', KEYS[3], ARGV[2])
end
if ARGV[3] ~= '1' then
  redis.call('HSET', KEYS[9], 'fence', ARGV[2])
end
return 1
"#;
