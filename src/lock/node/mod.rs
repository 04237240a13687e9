//! One Redis node: one connection, made on first use with timeouts and
//! remade after an error; commands, scripts and subscriptions on it; and
//! what kind of failure each error is.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use redis::cluster::ClusterConnection;
use redis::{Connection, ConnectionInfo, FromRedisValue, RedisError, Value};

use super::channels::Wakeups;
use super::endpoint::{Endpoint, SentinelTarget, Target};
use super::error::{classify, describe, Fault, NodeError, NodeResult};
use super::info::run_id_of;
use super::keys::LockKeys;
use super::protocol::Scripting;
use crate::secrets::scrub;

mod eviction;

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
    /// The protocol the current connection gets (`None`: not known yet,
    /// see `scriptless`), why scripts do not run there, and what `-v`
    /// says of it, taken by [`Node::take_said`].
    protocol: Option<(super::protocol::Protocol, Option<Scripting>)>,
    said: Vec<Said>,
    /// Scripts may go by their digest (see `wire`): false once this
    /// node refused EVALSHA itself.
    digests: bool,
}

/// Which protocol a node's connection got, as `-v` says it (see
/// `scriptless`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    /// The node's URL, password redacted.
    pub server: String,
    /// The protocol's name (`Protocol::name`).
    pub protocol: &'static str,
    /// The whole sentence.
    pub message: String,
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

/// A call of a round between its two halves (see [`Node::start`]).
pub(super) enum Sent {
    /// Sent; the reply is still to be read (on a Cluster, from the
    /// primary of the slot).
    /// `true`: by its digest (see `wire`).
    Pending(redis::Cmd, Option<u16>, bool),
    /// Answered already (a Cluster's call, or a failure to send).
    Done(NodeResult<Value>),
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
            protocol: None,
            said: Vec::new(),
            digests: true,
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

    /// Whether this node is a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.endpoint.target, Target::Cluster(_))
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
                    self.protocol = None;
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
            self.protocol = None;
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
        // A script goes by its digest, its text only where the server lacks
        // it (see `wire`): both within the one deadline.
        let mut digests = self.digests;
        let reply = match self.connect()? {
            Link::Plain(conn) => super::deadline::within(timeout, || {
                super::wire::by_digest(cmd, &mut digests, |cmd| cmd.query::<T>(conn))
            }),
            Link::Cluster(conn) => super::deadline::within(timeout * 2, || {
                super::wire::by_digest(cmd, &mut digests, |cmd| match slot {
                    Some(slot) => super::cluster::on_primary(conn, cmd, slot)
                        .and_then(|v| T::from_redis_value(v).map_err(RedisError::from)),
                    None => cmd.query::<T>(conn.as_mut()),
                })
            }),
        };
        self.digests = digests;
        reply.map_err(Failed::Redis)
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
        let result = self.send(cmd, slot);
        self.settle(result, cmd, slot)
    }

    /// The first reply to `cmd` (or why there is none) as the command's
    /// answer: on a Cluster a moving slot is waited out, behind sentinels a
    /// replica's refusal sends `cmd` again to the master they name now.
    fn settle<T: FromRedisValue>(
        &mut self,
        mut result: Result<T, Failed>,
        cmd: &redis::Cmd,
        slot: Option<u16>,
    ) -> NodeResult<T> {
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
        if let Err(Failed::Redis(e)) = &result {
            // A script this server will not run: the step without scripts.
            let code = e.code().unwrap_or_default();
            if let Some(why) = super::protocol::refused_eval(cmd, code, &e.to_string()) {
                (self.answered, self.ever_answered) = (true, true);
                let value = self.without_scripts(why, cmd, slot)?;
                return T::from_redis_value(value)
                    .map_err(|e| NodeError::unexpected(self.shown(), "a script", e.into()));
            }
        }
        if result.is_ok() && self.protocol.is_none() && is_eval(cmd) {
            let scripts = super::protocol::Protocol::Scripts;
            let note = super::scriptless::said(self.shown(), &scripts, "EVAL runs Lua scripts");
            self.set_protocol(scripts, None, note);
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

    /// The first half of a call in a round (see `fanout`): connect if
    /// need be and send `cmd` (a script of the lock), leaving its reply
    /// to [`Node::finish`]. A Cluster's call is made whole here: it may
    /// follow a MOVED to another server. On a Cluster a command without
    /// keys (WAIT, INFO) goes to the primary of `slot`.
    pub(super) fn start(&mut self, cmd: redis::Cmd, slot: Option<u16>) -> Sent {
        // Its master rechecked behind sentinels: by the round, for every
        // node at once (see `fanout::masters`).
        if self.scriptless_here(&cmd) {
            return Sent::Done(self.scriptless(&cmd, slot));
        }
        // By its digest where this node allows it, else whole (see `wire`).
        let (packed, short) = match self.digests.then(|| super::wire::short_form(&cmd)) {
            Some(Some(short)) => (short.get_packed_command(), true),
            _ => (super::wire::whole_form(&cmd).get_packed_command(), false),
        };
        let sent = match self.connect() {
            // A request is small: the socket's buffer takes it whole, and
            // its write timeout bounds a write that must wait.
            Ok(Link::Plain(conn)) => conn.send_packed_command(&packed).map_err(Failed::Redis),
            Ok(Link::Cluster(_)) => return Sent::Done(self.query_at(&cmd, slot)),
            Err(failed) => Err(failed),
        };
        match sent {
            Ok(()) => Sent::Pending(cmd, slot, short),
            Err(failed) => Sent::Done(self.settle(Err(failed), &cmd, slot)),
        }
    }

    /// The second half: the reply to what [`Node::start`] sent, read
    /// under the round's deadline, whose timer (`round`) the caller armed
    /// (see `deadline`).
    pub(super) fn finish(
        &mut self,
        sent: Sent,
        round: &super::deadline::Armed,
    ) -> NodeResult<Value> {
        let (cmd, slot, short) = match sent {
            Sent::Pending(cmd, slot, short) => (cmd, slot, short),
            Sent::Done(answer) => return answer,
        };
        let reply = match self.conn.as_mut() {
            // Where the server wants a script's text, it follows, under
            // the round's deadline still.
            Some(Link::Plain(conn)) => super::wire::finish(conn, &cmd, short, &mut self.digests),
            _ => return self.query_at(&cmd, slot),
        };
        self.settle(round.judge(reply).map_err(Failed::Redis), &cmd, slot)
    }

    /// The per-node timeout: connecting, and every command.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether a connection is to be made (none is open).
    pub(super) fn needs_connecting(&self) -> bool {
        self.conn.is_none()
    }

    /// Run one script's EVAL (see `calls.rs`, which builds it).
    pub(super) fn eval(&mut self, cmd: &redis::Cmd) -> NodeResult<Value> {
        self.recheck_master()?;
        match self.scriptless_here(cmd) {
            true => self.scriptless(cmd, None),
            false => self.query(cmd),
        }
    }

    /// Whether `cmd` is an EVAL to make without scripts: this connection
    /// refused one before (see `scriptless`).
    fn scriptless_here(&self, cmd: &redis::Cmd) -> bool {
        let scripts = Some(super::protocol::Protocol::Scripts);
        let known = self.protocol.as_ref().map(|p| p.0);
        self.conn.is_some() && known.is_some() && known != scripts && is_eval(cmd)
    }

    /// The protocol of the current connection (`None`: not known yet).
    pub(super) fn protocol(&self) -> Option<super::protocol::Protocol> {
        self.protocol.as_ref().map(|p| p.0)
    }

    /// Why scripts do not run on the current connection.
    pub(super) fn scripting(&self) -> Option<Scripting> {
        self.protocol.as_ref().and_then(|p| p.1.clone())
    }

    /// Record the current connection's protocol, and what `-v` says.
    pub(super) fn set_protocol(
        &mut self,
        protocol: super::protocol::Protocol,
        scripting: Option<Scripting>,
        message: String,
    ) {
        self.protocol = Some((protocol, scripting));
        let said = Said {
            server: scrub(self.shown()),
            protocol: protocol.name(),
            message,
        };
        if !self.said.contains(&said) {
            self.said.push(said);
        }
    }

    /// What `-v` says of the protocols this node's connections got.
    pub(super) fn take_said(&mut self) -> Vec<Said> {
        std::mem::take(&mut self.said)
    }

    /// `cmds` in one round trip (a pipeline; on a Cluster one after
    /// another to the primary of `slot`, on one connection): the replies.
    /// An error reply fails it all, and drops the connection (any WATCH
    /// or MULTI with it).
    pub(super) fn pipeline(
        &mut self,
        cmds: &[redis::Cmd],
        slot: Option<u16>,
    ) -> NodeResult<Vec<Value>> {
        let timeout = self.timeout;
        let replies = match self.connect() {
            Ok(Link::Plain(conn)) => {
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd.clone());
                }
                super::deadline::within(timeout, || pipe.query::<Vec<Value>>(conn))
                    .map_err(Failed::Redis)
            }
            Ok(Link::Cluster(_)) => {
                let mut replies = Vec::with_capacity(cmds.len());
                let mut failed = None;
                for cmd in cmds {
                    match self.send::<Value>(cmd, slot) {
                        Ok(reply) => replies.push(reply),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                failed.map_or(Ok(replies), Err)
            }
            Err(failed) => Err(failed),
        };
        match replies {
            Ok(replies) => {
                (self.answered, self.ever_answered) = (true, true);
                Ok(replies)
            }
            Err(failed) => Err(self.failure(failed, false)),
        }
    }

    /// Behind sentinels, what to ask them whether they still name the
    /// master this node's writes go to: before a write (`recheck`) only
    /// on an open connection whose master they named a while ago (see
    /// [`RECHECK`]), after one always. `None` elsewhere.
    pub(super) fn sentinels_to_ask(
        &mut self,
        recheck: bool,
    ) -> Option<(&mut SentinelTarget, &str)> {
        let fresh = self.named_at.is_some_and(|at| at.elapsed() < RECHECK);
        if recheck && (fresh || self.conn.is_none()) {
            return None;
        }
        match (&mut self.endpoint.target, &self.master) {
            (Target::Sentinel(target), Some(_)) => Some((target, &self.endpoint.shown)),
            _ => None,
        }
    }

    /// The master the sentinels named (asked as [`Node::sentinels_to_ask`]
    /// says): another one than this node's drops the connection (the next
    /// call finds the new master); after a write (`confirming`) it is an
    /// error too, as is no answer, for the write went to the old one.
    pub(super) fn named(
        &mut self,
        named: NodeResult<ConnectionInfo>,
        confirming: bool,
    ) -> NodeResult<()> {
        let (Target::Sentinel(target), Some(master)) = (&self.endpoint.target, &self.master) else {
            return Ok(());
        };
        let named = match named {
            Err(e) if !confirming => return Err(e),
            named => named,
        };
        let shown = &self.endpoint.shown;
        let checked = named.and_then(|n| super::sentinel::same(target, master, &n, shown));
        match checked.is_ok() {
            true => self.named_at = Some(Instant::now()),
            false => (self.conn, self.master) = (None, None),
        }
        match confirming {
            true => checked,
            false => Ok(()),
        }
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
    /// nodes Sentinel reconfigures are killed). A round does this for
    /// every node at once (`fanout::masters`).
    fn recheck_master(&mut self) -> NodeResult<()> {
        let timeout = self.timeout;
        let Some((target, shown)) = self.sentinels_to_ask(true) else {
            return Ok(());
        };
        let named = super::sentinel::named(target, timeout, shown);
        self.named(named, false)
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
            Some(Link::Plain(conn)) => Ok(Wakeups::new(conn, self.timeout, at, &keys.lock)),
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

/// A Cluster's answer while a slot moves: not executed, send again.
fn is_moving(e: &RedisError) -> bool {
    matches!(e.code(), Some("TRYAGAIN" | "ASK" | "MOVED"))
}

fn not_connected() -> Failed {
    Failed::Redis(RedisError::from(std::io::Error::other("not connected")))
}

/// Whether `cmd` is a script's call (its EVAL, or its EVALSHA: see `wire`).
fn is_eval(cmd: &redis::Cmd) -> bool {
    super::wire::is_script(cmd)
}

/// A write refused by a replica, also from inside a script.
fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY") || e.to_string().contains("READONLY")
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
