//! One Redis node: one connection, made on first use with timeouts and
//! remade after an error; commands, scripts and subscriptions on it; and
//! what kind of failure each error is.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use redis::cluster::ClusterConnection;
use redis::{Connection, ConnectionInfo, FromRedisValue, RedisError, Value};

use super::endpoint::{Endpoint, Target};
use super::error::{classify, describe, Fault, NodeError, NodeResult};
use super::keys::LockKeys;
use super::reply::{Acquire, Screened};
use crate::secrets::scrub;

/// A connection to one node, made on first use and remade after an error.
pub struct Node {
    endpoint: Endpoint,
    timeout: Duration,
    conn: Option<Link>,
    /// Behind sentinels: the master the current connection goes to.
    master: Option<ConnectionInfo>,
    /// Behind sentinels: when they last named `master` (on discovery, or
    /// asked again since).
    named_at: Option<Instant>,
    /// The current connection has answered at least once.
    answered: bool,
    /// Any connection to this node ever answered (a sentinel included).
    ever_answered: bool,
    /// Whether the server behind the current connection was checked for
    /// an evicting `maxmemory-policy`.
    memory: Memory,
    /// What the run should warn about (an eviction risk accepted, a check
    /// that could not be made), taken by [`Node::take_notes`].
    notes: Vec<String>,
}

/// Where the eviction check of a node stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Memory {
    /// Not checked on this connection yet.
    Unchecked,
    /// Checked: no eviction, or accepted with `--allow-eviction`.
    Checked,
    /// `INFO` is refused to this user (no `+info`) or not offered: said
    /// once, never asked again.
    Unreadable,
}

/// An open connection: to one server, or to a whole Cluster.
enum Link {
    Plain(Connection),
    Cluster(Box<ClusterConnection>),
}

/// Why a command got no reply: no connection, or the reply was an error.
enum Failed {
    Connect(NodeError),
    Redis(RedisError),
}

impl Node {
    /// `timeout` bounds connecting and every command.
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Node {
        Node {
            endpoint,
            timeout,
            conn: None,
            master: None,
            named_at: None,
            answered: false,
            ever_answered: false,
            memory: Memory::Unchecked,
            notes: Vec::new(),
        }
    }

    /// The node's URL, password redacted.
    pub fn shown(&self) -> &str {
        &self.endpoint.shown
    }

    /// Whether this node answered the last command (its connection is open).
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Whether this node has ever answered anything, error replies included.
    pub fn ever_answered(&self) -> bool {
        self.ever_answered
    }

    /// Whether this node is a Sentinel service or a Cluster.
    pub(super) fn is_topology(&self) -> bool {
        self.endpoint.is_topology()
    }

    /// Connect if not connected: behind sentinels, find the master first
    /// (again on every reconnect, as the Sentinel client guidelines say).
    fn connect(&mut self) -> Result<&mut Link, Failed> {
        if self.conn.is_none() {
            if self.memory == Memory::Checked {
                self.memory = Memory::Unchecked;
            }
            let link = match &mut self.endpoint.target {
                Target::Plain(info) => {
                    Link::Plain(super::dial::connect(info, self.timeout).map_err(Failed::Redis)?)
                }
                Target::Sentinel(target) => {
                    let found = super::sentinel::master(target, self.timeout, &self.endpoint.shown);
                    self.ever_answered |= found.sentinel_answered;
                    let (conn, master) = found.result.map_err(Failed::Connect)?;
                    (self.master, self.named_at) = (Some(master), Some(Instant::now()));
                    // The master answered ROLE.
                    (self.ever_answered, self.answered) = (true, true);
                    self.conn = Some(Link::Plain(conn));
                    return self.conn.as_mut().ok_or_else(not_connected);
                }
                Target::Cluster(seeds) => {
                    let tls = self.endpoint.tls.as_ref();
                    let conn = super::cluster::connect(seeds, tls, self.timeout);
                    Link::Cluster(Box::new(conn.map_err(Failed::Redis)?))
                }
            };
            self.answered = false;
            self.conn = Some(link);
        }
        self.conn.as_mut().ok_or_else(not_connected)
    }

    /// Send one command; on a Cluster, to the primary of `slot` if given,
    /// else where the command's first key lives.
    fn send<T: FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        slot: Option<u16>,
    ) -> Result<T, Failed> {
        let timeout = self.timeout;
        // One deadline for the whole reply (see `deadline`); a Cluster's
        // may follow a MOVED and an ASK on the way.
        let reply = match self.connect()? {
            Link::Plain(conn) => super::deadline::within(timeout, || cmd.query::<T>(conn)),
            Link::Cluster(conn) => super::deadline::within(timeout * 2, || match slot {
                Some(slot) => super::cluster::on_primary(conn, cmd, slot)
                    .and_then(|v| T::from_redis_value(v).map_err(RedisError::from)),
                None => cmd.query::<T>(conn.as_mut()),
            }),
        };
        reply.map_err(Failed::Redis)
    }

    /// Before the first acquire on a connection: refuse a server that may
    /// evict the lock's key while its holder runs (`maxmemory` set with any
    /// `maxmemory-policy` but `noeviction`: the key has a TTL, so every
    /// policy may pick it), unless `--allow-eviction` accepts the risk (a
    /// note). `maxmemory 0` is no limit. Usually the acquire script makes
    /// this check itself, before it writes anything ([`Node::screens`]);
    /// this is the way with `--allow-eviction`, whose warning needs the
    /// server's figures: `INFO memory`, one round trip per connection. A
    /// user without `+info` gets a note instead.
    pub(super) fn check_eviction(&mut self, keys: &LockKeys) -> NodeResult<()> {
        match self.memory {
            Memory::Unreadable => return Ok(()),
            Memory::Checked if self.conn.is_some() => return Ok(()),
            _ => {}
        }
        let info = self.send::<String>(redis::cmd("INFO").arg("memory"), Some(keys.slot()));
        let text = match info {
            Ok(text) => text,
            Err(Failed::Redis(e)) if cannot_read_info(&e) => {
                self.info_unreadable(&e.to_string());
                return Ok(());
            }
            Err(failed) => return Err(self.failure(failed, false)),
        };
        (self.answered, self.ever_answered) = (true, true);
        let Some((maxmemory, policy)) = eviction(&text) else {
            self.memory = Memory::Checked;
            return Ok(());
        };
        let risk = self.eviction_risk(&maxmemory.to_string(), policy);
        if self.endpoint.allow_eviction {
            self.memory = Memory::Checked;
            self.note(format!(
                "WARNING: {risk}; running anyway (--allow-eviction): a second holder may \
                 run beside this one"
            ));
            return Ok(());
        }
        Err(self.refuse_eviction(risk))
    }

    /// Whether the acquire script is to make the eviction check itself
    /// (`scripts::eviction_lib`): this connection was not checked (or a
    /// new one will be made), and no `--allow-eviction` (see
    /// [`Node::check_eviction`]).
    pub(super) fn screens(&self) -> bool {
        !self.endpoint.allow_eviction
            && match self.memory {
                Memory::Unchecked => true,
                Memory::Checked => self.conn.is_none(),
                Memory::Unreadable => false,
            }
    }

    /// What the acquire script's eviction check found: the acquire's
    /// answer (the connection is checked now); a refusal (nothing was
    /// written); or `None`: `INFO` is refused to this user (a note), so
    /// ask again without the check.
    pub(super) fn screened(&mut self, found: Screened) -> NodeResult<Option<Acquire>> {
        match found {
            Screened::Answer(answer) => {
                self.memory = Memory::Checked;
                Ok(Some(answer))
            }
            Screened::Evicts(maxmemory, policy) => {
                let risk = self.eviction_risk(&maxmemory, &policy);
                Err(self.refuse_eviction(risk))
            }
            Screened::NoInfo(error) => {
                self.info_unreadable(&error);
                Ok(None)
            }
            // Not checked for eviction: this is another server.
            Screened::Elsewhere(id) => Ok(Some(Acquire::Elsewhere(id))),
        }
    }

    fn eviction_risk(&self, maxmemory: &str, policy: &str) -> String {
        format!(
            "{}: the server may evict the lock's key while its holder runs \
             (maxmemory {} with maxmemory-policy {})",
            scrub(self.shown()),
            crate::secrets::untrusted(maxmemory),
            crate::secrets::untrusted(policy)
        )
    }

    fn refuse_eviction(&mut self, risk: String) -> NodeError {
        let fix = "set `CONFIG SET maxmemory-policy noeviction` (and in redis.conf), \
                   or accept the risk with --allow-eviction";
        // Said if a Redlock majority holds the lock without this node.
        self.note(format!(
            "{risk}: this node does not count for the lock; {fix}"
        ));
        NodeError {
            fault: Fault::Refused,
            error: anyhow!("{risk}: {fix}"),
        }
    }

    /// `INFO memory` is refused to this user: said once, not asked again.
    fn info_unreadable(&mut self, error: &str) {
        if self.memory != Memory::Unreadable {
            self.memory = Memory::Unreadable;
            self.note(format!(
                "{}: cannot check the server's maxmemory-policy (INFO memory: {}); \
                 grant the Redis user +info, or make sure the server never evicts \
                 keys (maxmemory-policy noeviction)",
                scrub(self.shown()),
                crate::secrets::untrusted(error)
            ));
        }
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// What this node found that the run should warn about, each once.
    pub(super) fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Send one command. Any failure drops the connection: after a timeout
    /// the stream may still carry a late reply.
    pub(super) fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> NodeResult<T> {
        self.query_at(cmd, None)
    }

    /// [`Node::query`], on a Cluster sent to the primary of `slot`.
    pub(super) fn query_at<T: FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        slot: Option<u16>,
    ) -> NodeResult<T> {
        let mut result = self.send(cmd, slot);
        if matches!(self.endpoint.target, Target::Cluster(_)) {
            result = self.while_moving(result, cmd, slot);
        }
        let sentinel = matches!(self.endpoint.target, Target::Sentinel(_));
        let mut rediscovered = false;
        if sentinel && matches!(&result, Err(Failed::Redis(e)) if is_readonly(e)) {
            // A failover made our master a replica: find the new one and
            // try once more (a write refused by a replica changed nothing).
            self.conn = None;
            result = self.send(cmd, slot);
            rediscovered = true;
        }
        match result {
            Ok(value) => {
                (self.answered, self.ever_answered) = (true, true);
                Ok(value)
            }
            Err(failed) => Err(self.failure(failed, rediscovered)),
        }
    }

    /// A failed command as a node's error; the connection is dropped.
    fn failure(&mut self, failed: Failed, rediscovered: bool) -> NodeError {
        match failed {
            Failed::Connect(e) => {
                self.conn = None;
                e
            }
            Failed::Redis(e) => {
                // Only before the first answer: later, a broken link is
                // what it seems, and the refresher has no time to ask.
                let e = match &self.endpoint.target {
                    Target::Cluster(seeds) if !self.ever_answered => {
                        super::cluster::explain(seeds, self.timeout, e)
                    }
                    _ => e,
                };
                let cluster = matches!(self.endpoint.target, Target::Cluster(_));
                let fault = match cluster && is_moving(&e) {
                    true => Fault::Moving,
                    false => classify(&e, self.answered),
                };
                // Anything but an I/O error is an answer from the server.
                self.ever_answered |= !e.is_io_error();
                self.conn = None;
                let mut error = match fault {
                    Fault::Moving => anyhow!(
                        "the Redis Cluster is moving the lock's slot ({}); try again",
                        e.code().unwrap_or("TRYAGAIN")
                    ),
                    _ => describe(e),
                };
                if rediscovered && fault == Fault::Refused {
                    error = error.context("the master the sentinels name is a replica");
                }
                NodeError {
                    fault,
                    error: error.context(scrub(&self.endpoint.shown)),
                }
            }
        }
    }

    /// A Cluster moving the lock's slot answers TRYAGAIN to our scripts
    /// (their keys are split between two nodes) until the move is over,
    /// and ASK or MOVED on the way; redis-rs follows a few of those, then
    /// gives up. Nothing was done: send again, with a growing pause, for
    /// up to the per-node timeout. A longer move is [`Fault::Moving`], and
    /// the caller tries again on its own schedule (within `--wait`, or the
    /// lease).
    fn while_moving<T: FromRedisValue>(
        &mut self,
        mut result: Result<T, Failed>,
        cmd: &redis::Cmd,
        slot: Option<u16>,
    ) -> Result<T, Failed> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = MOVING_PAUSE.0;
        while matches!(&result, Err(Failed::Redis(e)) if is_moving(e))
            && Instant::now() + pause < deadline
        {
            std::thread::sleep(pause);
            pause = (pause * 2).min(MOVING_PAUSE.1);
            result = self.send(cmd, slot);
        }
        result
    }

    /// Run one script with these KEYS (see `calls.rs`, which builds them).
    pub(super) fn eval(
        &mut self,
        script: &str,
        keys: &[String],
        args: &[&str],
    ) -> NodeResult<Value> {
        self.recheck_master()?;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        self.query(&cmd)
    }

    /// WAIT for `replicas` replicas to have this connection's writes to
    /// the lock's keys; returns how many confirmed within `limit`. On a
    /// Cluster, only the primary of the lock's slot is asked.
    pub fn wait_replicas(
        &mut self,
        keys: &LockKeys,
        replicas: u32,
        limit: Duration,
    ) -> NodeResult<i64> {
        let ms = super::timing::millis(limit);
        self.query_at(redis::cmd("WAIT").arg(replicas).arg(ms), Some(keys.slot()))
    }

    /// How many replicas the node (the lock's primary) says are connected
    /// (`INFO replication`).
    pub fn connected_replicas(&mut self, keys: &LockKeys) -> NodeResult<u64> {
        let info: String =
            self.query_at(redis::cmd("INFO").arg("replication"), Some(keys.slot()))?;
        let count = info
            .lines()
            .find_map(|line| line.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok());
        count.ok_or_else(|| {
            NodeError::unexpected(
                self.shown(),
                "INFO replication",
                anyhow!("no connected_slaves"),
            )
        })
    }

    /// How many replicas of the node (the lock's primary) are really
    /// acknowledging its writes (`INFO replication`; see
    /// [`acknowledging`]): those `--replicas auto` waits for.
    pub fn acknowledging_replicas(&mut self, keys: &LockKeys) -> NodeResult<u64> {
        let info: String =
            self.query_at(redis::cmd("INFO").arg("replication"), Some(keys.slot()))?;
        if !info.contains("connected_slaves:") {
            return Err(NodeError::unexpected(
                self.shown(),
                "INFO replication",
                anyhow!("no connected_slaves"),
            ));
        }
        Ok(acknowledging(&info))
    }

    /// The server's `run_id` (`INFO server`): it tells one server from
    /// another whatever address or socket reached it. `None` for a
    /// Cluster (many servers) or when the reply has none.
    ///
    /// The default sections (a plain `INFO`) also carry the memory
    /// settings: a server that cannot evict is then checked for this
    /// connection (see [`Node::check_eviction`]), which saves a Redlock
    /// node a round trip before its first acquire. One that can evict
    /// is asked again there, and refused with the whole message.
    pub(super) fn run_id(&mut self) -> NodeResult<Option<String>> {
        if matches!(self.endpoint.target, Target::Cluster(_)) {
            return Ok(None);
        }
        let info: String = self.query(&redis::cmd("INFO"))?;
        let settings = info.contains("\nmaxmemory:") && info.contains("\nmaxmemory_policy:");
        if settings && eviction(&info).is_none() && self.memory == Memory::Unchecked {
            self.memory = Memory::Checked;
        }
        Ok(run_id_of(&info))
    }

    /// Behind sentinels: check that they still name the master this
    /// node's writes went to; if not, drop the connection (the next call
    /// finds the new master). Elsewhere nothing to check.
    pub(super) fn confirm_master(&mut self) -> NodeResult<()> {
        let (Target::Sentinel(target), Some(master)) = (&mut self.endpoint.target, &self.master)
        else {
            return Ok(());
        };
        let checked = super::sentinel::confirm(target, master, self.timeout, &self.endpoint.shown);
        match checked.is_ok() {
            true => self.named_at = Some(Instant::now()),
            false => (self.conn, self.master) = (None, None),
        }
        checked
    }

    /// Behind sentinels: how many replicas of the service they know
    /// (`None` elsewhere, or when no sentinel answers).
    pub(super) fn known_replicas(&self) -> Option<u64> {
        match &self.endpoint.target {
            Target::Sentinel(target) => super::sentinel::known_replicas(target, self.timeout),
            _ => None,
        }
    }

    /// Behind sentinels, before a write on a connection whose master they
    /// named a while ago: ask them again, and if they name another one now,
    /// drop the connection, so that the write goes to the master they name.
    /// A failover leaves a reachable old master accepting writes for
    /// seconds, and our connection to it open (only the connections to the
    /// nodes Sentinel reconfigures are killed).
    fn recheck_master(&mut self) -> NodeResult<()> {
        let fresh = self.named_at.is_some_and(|at| at.elapsed() < RECHECK);
        let (Target::Sentinel(target), Some(master)) = (&mut self.endpoint.target, &self.master)
        else {
            return Ok(());
        };
        if fresh || self.conn.is_none() {
            return Ok(());
        }
        let named = super::sentinel::named(target, self.timeout, &self.endpoint.shown)?;
        match named.addr() == master.addr() {
            true => self.named_at = Some(Instant::now()),
            false => (self.conn, self.master) = (None, None),
        }
        Ok(())
    }

    /// Open a second connection, subscribed to `channels`: to this
    /// server, to the master the sentinels named, or to the primary of the
    /// lock's slot in a Cluster (classic PUBLISH reaches every node of a
    /// Cluster; the primary is where the lock's scripts publish).
    pub fn subscribe(&self, keys: &LockKeys, channels: &[&str]) -> NodeResult<Wakeups> {
        let endpoint = match (&self.endpoint.target, &self.master) {
            (Target::Sentinel(_), Some(master)) => self.endpoint.plain(master.clone()),
            (Target::Cluster(seeds), _) => {
                let primaries = self.cluster_primaries(seeds)?;
                let primary = primaries
                    .iter()
                    .find(|p| p.slots.iter().any(|r| r.contains(&keys.slot())))
                    .ok_or_else(|| NodeError {
                        fault: Fault::Dropped,
                        error: anyhow!("{}: no primary serves slot {}", self.shown(), keys.slot()),
                    })?;
                self.endpoint.plain(primary.info.clone())
            }
            _ => self.endpoint.clone(),
        };
        let mut other = Node::new(endpoint, self.timeout);
        // Behind sentinels and on a Cluster the lock's keys may move to
        // another server than this subscription's (a failover, a
        // resharding): its run_id tells the scripts (see `scripts::line_lib`).
        let at = match self.endpoint.is_topology() {
            true => other
                .query::<String>(redis::cmd("INFO").arg("server"))
                .ok()
                .and_then(|info| run_id_of(&info))
                .map(String::into_boxed_str),
            false => None,
        };
        // A plain query, unlike `PubSub::subscribe`, reports NOPERM. It
        // reads the first confirmation; `get_message` skips the others.
        other.query::<Value>(redis::cmd("SUBSCRIBE").arg(channels))?;
        match other.conn.take() {
            Some(Link::Plain(conn)) => Ok(Wakeups {
                conn,
                timeout: self.timeout,
                at,
            }),
            _ => Err(NodeError {
                fault: Fault::Dropped,
                error: anyhow!("{}: not connected", self.shown()),
            }),
        }
    }

    /// A Cluster's primaries (asked of the seeds in turn), each as a node
    /// of its own; `None` for any other endpoint.
    pub(super) fn primaries(&self) -> NodeResult<Option<Vec<Node>>> {
        let Target::Cluster(seeds) = &self.endpoint.target else {
            return Ok(None);
        };
        let nodes = self
            .cluster_primaries(seeds)?
            .into_iter()
            .map(|p| Node::new(self.endpoint.plain(p.info), self.timeout))
            .collect();
        Ok(Some(nodes))
    }

    fn cluster_primaries(
        &self,
        seeds: &[ConnectionInfo],
    ) -> NodeResult<Vec<super::cluster::Primary>> {
        super::cluster::primaries(seeds, self.timeout).map_err(|e| NodeError {
            fault: classify(&e, false),
            error: describe(e).context(scrub(self.shown())),
        })
    }
}

/// Behind sentinels, a write on a connection whose master they named
/// longer ago than this asks them again first.
const RECHECK: Duration = Duration::from_millis(500);

/// Bounds of the pause between sends while a Cluster slot moves.
const MOVING_PAUSE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(100));

/// `maxmemory` and `maxmemory_policy` of `INFO memory` when the server
/// may evict keys that have a TTL: a limit (0 is none) and a policy other
/// than `noeviction`. A server that does not say is taken at its word.
fn eviction(info: &str) -> Option<(u64, &str)> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let maxmemory = field("maxmemory")?.parse::<u64>().ok()?;
    let policy = field("maxmemory_policy")?;
    (maxmemory > 0 && policy != "noeviction").then_some((maxmemory, policy))
}

/// A replica that has not acknowledged the stream for longer than this
/// (`lag`, whole seconds since its last REPLCONF ACK, sent every second)
/// is not counted by `--replicas auto`: it is stopped, hung or cut off,
/// though the primary still counts it connected until `repl-timeout`
/// (60 s).
pub const ACK_LAG_SECS: u64 = 2;

/// The replicas in `INFO replication` that are online and acknowledged
/// within [`ACK_LAG_SECS`]: `slaveN:ip=...,port=...,state=online,
/// offset=...,lag=0`.
pub fn acknowledging(info: &str) -> u64 {
    let acking = info
        .lines()
        .filter(|line| {
            line.strip_prefix("slave")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|line| {
            let field = |name: &str| {
                line.split_once(':')?
                    .1
                    .split(',')
                    .find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('='))
            };
            let lag = field("lag").and_then(|lag| lag.parse::<u64>().ok());
            field("state") == Some("online") && lag.is_some_and(|lag| lag <= ACK_LAG_SECS)
        })
        .count();
    u64::try_from(acking).unwrap_or(u64::MAX)
}

/// The `run_id` field of an `INFO` reply, if it has one.
fn run_id_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
}

/// `INFO` refused to the user (no `+info`), or renamed away.
fn cannot_read_info(e: &RedisError) -> bool {
    let message = e.to_string();
    e.code() == Some("NOPERM")
        || message.contains("NOPERM")
        || message.contains("no permissions")
        || message.contains("unknown command")
}

/// A Cluster's answer while a slot moves: not executed, send again.
fn is_moving(e: &RedisError) -> bool {
    matches!(e.code(), Some("TRYAGAIN" | "ASK" | "MOVED"))
}

fn not_connected() -> Failed {
    Failed::Redis(RedisError::from(std::io::Error::other("not connected")))
}

/// A write refused by a replica, also from inside a script.
fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY") || e.to_string().contains("READONLY")
}

/// Wake-ups from a lock's channels, on a connection of their own: the
/// lock's connection stays free for commands.
pub struct Wakeups {
    conn: Connection,
    /// The per-node timeout: how long a message may take to come whole
    /// once the wait for one is over.
    timeout: Duration,
    /// The `run_id` of the server subscribed on, behind sentinels and on
    /// a Cluster (see [`Node::subscribe`]).
    at: Option<Box<str>>,
}

impl Wakeups {
    /// The `run_id` of the server these wake-ups come from, where the
    /// lock's keys may move to another server (Sentinel, Cluster).
    pub fn at(&self) -> Option<&str> {
        self.at.as_deref()
    }

    /// Block up to `d` (not zero) for a message: `Ok(Some(payload))` if one
    /// came (empty if not text), `Ok(None)` on timeout or a signal, an
    /// error if the connection broke. See `wakeups::listen`.
    pub fn message(&mut self, d: Duration) -> anyhow::Result<Option<String>> {
        let mut pubsub = self.conn.as_pubsub();
        // Each read waits up to `d`; a message trickled a byte at a time
        // must not hold us longer than that and the per-node timeout.
        let armed = super::deadline::Armed::new(d.saturating_add(self.timeout));
        let got = pubsub
            .set_read_timeout(Some(d))
            .and_then(|()| pubsub.get_message());
        let overrun = armed.disarm();
        // Dropping a PubSub unsubscribes: a round trip that could block on a
        // dead server. The subscription ends with the connection instead.
        // Nothing leaks: its queue only fills while a command awaits a reply.
        std::mem::forget(pubsub);
        match got {
            Ok(msg) => Ok(Some(msg.get_payload::<String>().unwrap_or_default())),
            // Cut in the middle of a message: the connection is no use.
            Err(_) if overrun => Err(describe(super::deadline::overrun(d + self.timeout))),
            Err(e) if e.is_timeout() => Ok(None),
            // A signal: a read with a timeout is never restarted (signal(7)),
            // which is what lets the caller notice it at once.
            Err(e) if e.is_io_error() && e.to_string().contains("os error 4)") => Ok(None),
            Err(e) => Err(describe(e)),
        }
    }
}

/// A context line for an unexpected reply.
pub(super) trait Unexpected<T> {
    fn unexpected(self, node: &Node, what: &str) -> NodeResult<T>;
}

impl<T> Unexpected<T> for anyhow::Result<T> {
    fn unexpected(self, node: &Node, what: &str) -> NodeResult<T> {
        self.map_err(|why| NodeError::unexpected(node.shown(), what, why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_needs_a_limit_and_an_evicting_policy() {
        let info = |limit: &str, policy: &str| {
            format!(
                "# Memory\r\nused_memory:1\r\nmaxmemory:{limit}\r\nmaxmemory_human:x\r\n\
                 maxmemory_policy:{policy}\r\n"
            )
        };
        assert_eq!(
            eviction(&info("1048576", "allkeys-lru")),
            Some((1048576, "allkeys-lru"))
        );
        assert_eq!(
            eviction(&info("5", "volatile-ttl")),
            Some((5, "volatile-ttl"))
        );
        assert_eq!(eviction(&info("0", "allkeys-lru")), None);
        assert_eq!(eviction(&info("1048576", "noeviction")), None);
        assert_eq!(eviction("# Memory\r\nused_memory:1\r\n"), None);
        assert_eq!(eviction(&info("lots", "allkeys-lru")), None);
    }

    #[test]
    fn only_online_replicas_that_acknowledged_lately_count() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:4\r\n\
            slave0:ip=127.0.0.1,port=1,state=online,offset=90,lag=0\r\n\
            slave1:ip=127.0.0.1,port=2,state=online,offset=80,lag=7\r\n\
            slave2:ip=127.0.0.1,port=3,state=wait_bgsave,offset=0,lag=0\r\n\
            slave3:ip=127.0.0.1,port=4,state=online,offset=90,lag=2\r\n\
            slave_read_repl_offset:5\r\nmaster_repl_offset:90\r\n";
        assert_eq!(acknowledging(info), 2);
        assert_eq!(acknowledging("# Replication\r\nconnected_slaves:0\r\n"), 0);
        assert_eq!(acknowledging("slave0:state=online,lag=x\r\n"), 0);
    }
}
