//! `redlock-run doctor`: every setting of the servers that weakens a lock,
//! checked before any job runs. Each server's URL once, then one line per
//! check under it, `PASS`, `WARN` or `FAIL`, wrapped at 80 columns with
//! the fix on a line of its own, and a summary line; `--json`, one object
//! per check. Exit as the rest of the tool does for a server it cannot
//! reach (69) or that refuses us (77); else [`Exit::DoctorFail`] (78) for
//! a FAIL, 0 without one.
//!
//! Behaviour is read from what a server says it has (`INFO` fields,
//! whether a command answers), never from `redis_version`: Valkey says
//! 7.2.4 forever.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::Conn;
use crate::exit::{Exit, Failure};
use crate::lock::probe::{self, Conn as Link, Failed, Layout, Primary, Reply, Server};
use crate::lock::protocol::{self, Scripting};
use crate::lock::{timing, Endpoint, LockKeys, Replicas};
use crate::log::show;
use crate::secrets::{escaped, untrusted};

/// What `doctor` is asked to check against.
#[derive(Debug, Clone)]
pub struct Options {
    /// The lock whose keys, channels and Cluster slot are checked.
    pub key: String,
    /// The TTL runs will use: it sets the per-node timeout and the drift
    /// allowance.
    pub ttl: Duration,
    pub replicas: Replicas,
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
enum Status {
    Pass,
    Warn,
    Fail,
}

/// One check's verdict.
#[derive(Debug, Serialize)]
struct Check {
    status: Status,
    check: &'static str,
    node: String,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
    /// The exit this finding means beyond a FAIL: the server could not be
    /// reached (69) or refused us (77), as for every other subcommand.
    #[serde(skip)]
    exit: Option<Exit>,
}

/// Where the verdicts go, and what each server is checked against.
struct Doctor {
    opts: Options,
    keys: LockKeys,
    timeout: Duration,
    checks: Vec<Check>,
    /// The `run_id` of the last data server checked (INFO).
    run_id: Option<String>,
    /// Each plain or Sentinel endpoint's server by its `run_id`: one
    /// server under two names would be two Redlock nodes.
    run_ids: Vec<(String, String)>,
    /// The kind of endpoint being checked: it adds the rights a run
    /// needs there.
    topology: Topology,
}

/// What a data server is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    Plain,
    /// Behind sentinels: the master is checked with ROLE.
    Sentinel,
    /// A Cluster: PING and CLUSTER SLOTS to find the slots.
    Cluster,
}

impl Doctor {
    /// Details quote the servers (INFO fields, addresses the sentinels
    /// name): escaped here, once for every check and both formats.
    fn add(&mut self, status: Status, check: &'static str, node: &str, detail: String) {
        self.checks.push(Check {
            status,
            check,
            node: escaped(node),
            detail: escaped(&detail),
            fix: None,
            exit: None,
        });
    }

    fn pass(&mut self, check: &'static str, node: &str, detail: String) {
        self.add(Status::Pass, check, node, detail);
    }

    fn bad(&mut self, status: Status, check: &'static str, node: &str, detail: String, fix: &str) {
        self.add(status, check, node, detail);
        if let Some(last) = self.checks.last_mut() {
            last.fix = Some(fix.to_string());
        }
    }

    /// A FAIL that means what `exit` means elsewhere: the server could not
    /// be reached (69), or it refused us (77).
    fn out_of_reach(
        &mut self,
        exit: Exit,
        check: &'static str,
        node: &str,
        detail: String,
        fix: &str,
    ) {
        self.bad(Status::Fail, check, node, detail, fix);
        if let Some(last) = self.checks.last_mut() {
            last.exit = Some(exit);
        }
    }

    /// 69 if a server could not be reached, else 77 if one refused us,
    /// else 78 if a check failed, else 0.
    fn exit(&self) -> Exit {
        let meant = |exit: Exit| self.checks.iter().any(|c| c.exit == Some(exit));
        let failed = self.checks.iter().any(|c| c.status == Status::Fail);
        match () {
            () if meant(Exit::Unavailable) => Exit::Unavailable,
            () if meant(Exit::Refused) => Exit::Refused,
            () if failed => Exit::DoctorFail,
            () => Exit::Success,
        }
    }
}

impl Doctor {
    /// How a run on this host would hold COMMAND's tree (docs/safety.md,
    /// "The tree's end"): a cgroup where one can be made, else the keeper
    /// alone (a WARN only without /proc: then it cannot find a process
    /// that left COMMAND's group).
    fn tree(&mut self) {
        let (cgroup, line) = crate::child::Containment::probe();
        let node = "this host";
        let detail = format!("COMMAND's tree would be held by {line}");
        if cgroup || crate::child::proc_is_ours() {
            self.pass("tree", node, detail);
        } else {
            self.bad(
                Status::Warn,
                "tree",
                node,
                format!("{detail}, without a usable /proc: processes that leave COMMAND's group cannot be found"),
                "mount /proc, or run as root or in a delegated cgroup v2 subtree (Linux 5.14+) for a cgroup of its own",
            );
        }
    }
}

impl Doctor {
    /// Each endpoint's checks, in order.
    fn endpoints(&mut self, endpoints: &[Endpoint]) {
        let layouts: Vec<Layout> = endpoints.iter().map(probe::layout).collect();
        // Every plain server is connected to at once (see `probe::connect_each`).
        let plain: Vec<&Server> = (layouts.iter())
            .filter_map(|l| match l {
                Layout::Plain(server) => Some(server),
                _ => None,
            })
            .collect();
        let mut made = probe::connect_each(&plain, self.timeout).into_iter();
        for (endpoint, layout) in endpoints.iter().zip(layouts) {
            let shown = endpoint.shown.clone();
            self.run_id = None;
            match layout {
                Layout::Plain(server) => {
                    self.topology = Topology::Plain;
                    let needed = self.needed(false);
                    let link = made.next().unwrap_or_else(|| server.connect(self.timeout));
                    self.server(&server, link, &shown, needed);
                }
                Layout::Sentinel {
                    sentinels,
                    service,
                    data,
                } => {
                    self.topology = Topology::Sentinel;
                    self.sentinel(&sentinels, &service, &data, &shown);
                }
                // Many servers: the run does not compare them either.
                Layout::Cluster(seeds) => {
                    self.topology = Topology::Cluster;
                    self.cluster(&seeds, &shown);
                    self.run_id = None;
                }
            }
            if let Some(id) = self.run_id.take() {
                self.run_ids.push((shown, id));
            }
        }
    }
}

pub fn run(conn: Conn, opts: Options) -> Result<Exit, Failure> {
    let mut doctor = Doctor {
        keys: LockKeys::new(&conn.prefix, &opts.key),
        timeout: timing::node_timeout(opts.ttl),
        opts,
        checks: Vec::new(),
        run_id: None,
        run_ids: Vec::new(),
        topology: Topology::Plain,
    };
    doctor.endpoints(&conn.endpoints);
    doctor.same_server();
    doctor.tree();
    let exit = doctor.exit();
    let text: String = match doctor.opts.json {
        true => doctor
            .checks
            .iter()
            .map(|c| serde_json::to_string(c).unwrap_or_default() + "\n")
            .collect(),
        false => report(&doctor.checks, exit, conn.endpoints.len()),
    };
    crate::log::to_stdout(text.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}"))?;
    Ok(exit)
}

/// The width the text report is wrapped at.
const WIDTH: usize = 80;

/// Where a check's text starts: after `  STATUS  check-name   `.
const INDENT: usize = 21;

/// The text report: each node once, its checks under it (wrapped at
/// [`WIDTH`], the fix on a line of its own), then the summary line.
fn report(checks: &[Check], exit: Exit, servers: usize) -> String {
    let mut out = String::new();
    let mut node: Option<&str> = None;
    for c in checks {
        if node != Some(c.node.as_str()) {
            node = Some(&c.node);
            out.push_str(&c.node);
            out.push('\n');
        }
        out.push_str(&check_lines(c));
    }
    out + &summary(checks, exit, servers)
}

/// `  PASS  check        detail`, wrapped, and `fix: ...` under it.
fn check_lines(c: &Check) -> String {
    let status = match c.status {
        Status::Pass => "PASS",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
    };
    let head = format!("  {status}  {:<12} ", c.check);
    let mut out = wrap(&head, &c.detail);
    if let Some(fix) = &c.fix {
        out.push_str(&wrap(&" ".repeat(INDENT), &format!("fix: {fix}")));
    }
    out
}

/// `text` after `head`, wrapped at [`WIDTH`] with its continuation lines
/// indented to [`INDENT`]; a word longer than a line (a URL) stays whole.
fn wrap(head: &str, text: &str) -> String {
    let mut out = String::new();
    let mut line = head.to_string();
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let fits = line.chars().count() + 1 + word.chars().count() <= WIDTH;
        if !empty && !fits {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(INDENT);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// "summary: 7 PASS, 1 WARN, 0 FAIL (1 server): usable, with warnings;
/// exit 0", within [`WIDTH`].
fn summary(checks: &[Check], exit: Exit, servers: usize) -> String {
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let (pass, warn, fail) = (
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail),
    );
    let servers = match servers {
        1 => "1 server".to_string(),
        n => format!("{n} servers"),
    };
    let verdict = match exit {
        Exit::Unavailable => "a server is unreachable",
        Exit::Refused => "a server refused us",
        Exit::DoctorFail => "a setting breaks locks",
        _ if warn > 0 => "usable, with warnings",
        _ => "ready for locks",
    };
    format!(
        "summary: {pass} PASS, {warn} WARN, {fail} FAIL ({servers}): {verdict}; exit {}\n",
        exit.code()
    )
}

/// A measured duration: milliseconds with two decimals below a second.
fn fine(d: Duration) -> String {
    match d < Duration::from_secs(1) {
        true => format!("{:.2}ms", d.as_secs_f64() * 1000.0),
        false => show(d),
    }
}

/// `INFO` as field -> value.
type Info = HashMap<String, String>;

fn parse_info(text: &str) -> Info {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Now by this host's clock, in microseconds since the epoch.
fn host_micros() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_micros()).unwrap_or(i128::MAX))
        .unwrap_or(0)
}

impl Doctor {
    /// The replicas that must confirm each write: `--replicas N`, or with
    /// `auto` (the default on Sentinel and Cluster) none required but one
    /// used when there is any.
    fn needed(&self, topology: bool) -> Option<u32> {
        match self.opts.replicas {
            Replicas::Exactly(n) => Some(n),
            Replicas::Auto => None,
            Replicas::Default if topology => None,
            Replicas::Default => Some(0),
        }
    }

    /// Every check of one data server (a server, a master, a primary),
    /// on the connection made to it (`made`). `needed`: the replicas
    /// `--replicas` requires (None: `auto`).
    fn server(
        &mut self,
        server: &Server,
        made: Result<Link, Failed>,
        node: &str,
        needed: Option<u32>,
    ) {
        let mut link = match made {
            Ok(link) => link,
            Err(e) => {
                let (exit, fix) = match &e {
                    Failed::Refused { .. } => (
                        Exit::Refused,
                        "give the user and password in the URL \
                         (redis://[USER]:PASSWORD@HOST:PORT), or --password-file",
                    ),
                    Failed::Io(_) => (
                        Exit::Unavailable,
                        "check the host and port in the URL, that the server runs, and that \
                         the network lets this host reach it within the per-node timeout",
                    ),
                };
                let detail = format!("cannot connect to {}: {e}", server.address);
                return self.out_of_reach(exit, "connect", node, detail, fix);
            }
        };
        if !self.round_trip(&mut link, node) {
            return;
        }
        let info = match link.call(&["INFO"]) {
            Ok(reply) => Some(parse_info(&reply.text().unwrap_or_default())),
            Err(_) => None,
        };
        match &info {
            Some(info) => {
                self.run_id = info.get("run_id").filter(|id| !id.is_empty()).cloned();
                self.kind(info, node);
                self.role(info, node, needed);
                self.eviction(info, node);
                self.persistence(info, &mut link, node);
            }
            None => self.bad(
                Status::Warn,
                "info",
                node,
                "INFO is refused, so eviction, persistence and the server's role cannot be \
                 checked (a run needs INFO only for --replicas)"
                    .into(),
                "grant +info to the Redis user, or check maxmemory-policy, persistence and \
                 the role by hand",
            ),
        }
        let scripts = self.scripting(&mut link, node);
        self.rights(server, &mut link, node, (needed, scripts));
        self.clock(server, &mut link, node);
    }

    /// PING a few times; the slowest answer against the per-node timeout.
    fn round_trip(&mut self, link: &mut Link, node: &str) -> bool {
        let mut slowest = Duration::ZERO;
        for _ in 0..5 {
            let sent = Instant::now();
            // Any answer times a round trip: a user without +ping gets NOPERM.
            let answer = match link.call(&["PING"]) {
                Err(Failed::Refused { code, .. })
                    if !matches!(code.as_str(), "NOAUTH" | "WRONGPASS") =>
                {
                    Ok(Reply::Nil)
                }
                other => other,
            };
            if let Err(e) = answer {
                self.ping_failed(&e, node);
                return false;
            }
            slowest = slowest.max(sent.elapsed());
        }
        let detail = format!(
            "slowest of 5 PINGs {} against a per-node timeout of {} (--ttl {})",
            fine(slowest),
            show(self.timeout),
            show(self.opts.ttl)
        );
        let fix = "a longer --ttl gives each node a longer timeout (ttl / 10, at most 1s); \
                   or use a server closer to this host";
        if slowest >= self.timeout {
            self.bad(Status::Fail, "round-trip", node, detail, fix);
        } else if slowest * 2 >= self.timeout {
            self.bad(Status::Warn, "round-trip", node, detail, fix);
        } else {
            self.pass("round-trip", node, detail);
        }
        true
    }

    /// A PING that got no answer, or an error. Too slow for this TTL is a
    /// finding (a longer --ttl fixes it); a refusal or a broken connection
    /// is what it is elsewhere (77, 69).
    fn ping_failed(&mut self, e: &Failed, node: &str) {
        let timed_out = matches!(e, Failed::Io(why) if why == "timed out");
        let detail = match timed_out {
            true => format!(
                "PING got no answer within the per-node timeout of {} (--ttl {})",
                show(self.timeout),
                show(self.opts.ttl)
            ),
            false => format!("PING failed: {e}"),
        };
        let fix = match e {
            Failed::Refused { .. } => {
                "give the user and password in the URL (redis://[USER]:PASSWORD@HOST:PORT)"
            }
            Failed::Io(_) if timed_out => {
                "a longer --ttl gives each node a longer timeout (ttl / 10, at most 1s); \
                 or use a server closer to this host"
            }
            Failed::Io(_) => "check the URL and the network",
        };
        match e {
            Failed::Io(_) if timed_out => self.bad(Status::Fail, "round-trip", node, detail, fix),
            Failed::Io(_) => self.out_of_reach(Exit::Unavailable, "round-trip", node, detail, fix),
            Failed::Refused { .. } => {
                self.out_of_reach(Exit::Refused, "round-trip", node, detail, fix)
            }
        }
    }

    /// Which server this is, by the fields its `INFO` has.
    fn kind(&mut self, info: &Info, node: &str) {
        if self.kind_foreign(info, node) {
            return;
        }
        let field = |name: &str| info.get(name).cloned().unwrap_or_default();
        let untested = "not tested with redlock-run";
        // KeyDB has no version field of its own: its INFO has a "# KeyDB"
        // section (mvcc_depth), and it calls itself Redis 6.3, which Redis
        // never was.
        let keydb = info.contains_key("mvcc_depth")
            || field("executable").contains("keydb")
            || field("redis_version").starts_with("6.3.");
        if keydb || field("role") == "active-replica" {
            let detail = format!(
                "KeyDB (redis_version {}): with active-replica (multi-master) two masters \
                 can grant the same lock; {untested}",
                field("redis_version")
            );
            let fix = "use Redis or Valkey, or KeyDB without active-replica and multi-master";
            let status = match field("role") == "active-replica" {
                true => Status::Fail,
                false => Status::Warn,
            };
            return self.bad(status, "server", node, detail, fix);
        }
        if field("server_name") == "valkey" || info.contains_key("valkey_version") {
            let detail = format!(
                "Valkey {} (tested in CI: 8.1 and 9.1)",
                field("valkey_version")
            );
            return self.pass("server", node, detail);
        }
        if info.contains_key("redis_version") {
            let detail = format!(
                "Redis {} (tested in CI: 6.2 and 7.0)",
                field("redis_version")
            );
            return self.pass("server", node, detail);
        }
        self.bad(
            Status::Warn,
            "server",
            node,
            "INFO names no known server (no redis_version): a proxy or another \
             implementation, not tested with redlock-run"
                .into(),
            "check that it runs Lua scripts atomically and replicates them (see the README's \
             Compatibility section)",
        );
    }

    /// A server whose scripts redlock-run cannot trust (or run): reported,
    /// and true.
    fn kind_foreign(&mut self, info: &Info, node: &str) -> bool {
        let field = |name: &str| info.get(name).cloned().unwrap_or_default();
        let untested = "not tested with redlock-run";
        if info.contains_key("dragonfly_version") {
            let detail = format!(
                "Dragonfly {}: it refuses scripts that touch keys they do not declare, \
                 and redlock-run's scripts do (the line of waiters); {untested}",
                field("dragonfly_version")
            );
            let fix = "use Redis or Valkey (Dragonfly's --default_lua_flags=allow-undeclared-keys \
                       runs the scripts without its atomicity guarantees)";
            self.bad(Status::Fail, "server", node, detail, fix);
            return true;
        }
        if info.contains_key("kvrocks_version") {
            let detail = format!(
                "kvrocks {}: its scripts are not atomic under a crash, so a lock can be \
                 half written; {untested}",
                field("kvrocks_version")
            );
            self.bad(Status::Fail, "server", node, detail, "use Redis or Valkey");
            return true;
        }
        if info.contains_key("garnet_version") {
            let detail = format!(
                "Garnet {}: Lua is off by default (--lua), and {untested}",
                field("garnet_version")
            );
            let fix =
                "use Redis or Valkey, or start Garnet with --lua and check the scripting line";
            self.bad(Status::Warn, "server", node, detail, fix);
            return true;
        }
        false
    }

    /// A replica refuses writes (or accepts them and loses them).
    fn role(&mut self, info: &Info, node: &str, needed: Option<u32>) {
        let role = info.get("role").map(String::as_str).unwrap_or("");
        if role == "slave" || role == "replica" {
            let of = match (info.get("master_host"), info.get("master_port")) {
                (Some(h), Some(p)) => format!(" of {h}:{p}"),
                _ => String::new(),
            };
            let read_only = match info.get("slave_read_only").map(String::as_str) {
                Some("0") => "it accepts writes but its primary overwrites them",
                _ => "it is read-only and refuses every lock write",
            };
            let detail = format!("the server is a replica{of}: {read_only}");
            let fix = "give the primary's URL, or a redis+sentinel:// URL that finds the \
                       current master";
            return self.bad(Status::Fail, "role", node, detail, fix);
        }
        let replicas: u64 = info
            .get("connected_slaves")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        self.pass(
            "role",
            node,
            format!("a primary with {replicas} connected replica(s)"),
        );
        match needed {
            Some(0) => {}
            Some(n) if replicas < u64::from(n) => self.bad(
                Status::Fail,
                "replicas",
                node,
                format!("--replicas {n} needs {n} replica(s); {replicas} connected"),
                "add replicas, or lower --replicas",
            ),
            Some(n) => self.pass(
                "replicas",
                node,
                format!("--replicas {n}: {replicas} replica(s) connected"),
            ),
            None => self.auto_replicas(info, replicas, node),
        }
    }

    /// The `replicas` line of `--replicas auto`: it waits for one replica
    /// that is acknowledging (see `lock::acknowledging`), if any.
    fn auto_replicas(&mut self, info: &Info, replicas: u64, node: &str) {
        let text: String = info.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let acking = crate::lock::acknowledging(&text);
        let fix = "add a replica (or pass --replicas 0 to accept this)";
        if replicas == 0 {
            let detail = "--replicas auto: no replica is connected, so no write is confirmed by \
                          one and a failover would start from an empty copy";
            return self.bad(Status::Warn, "replicas", node, detail.into(), fix);
        }
        if acking == 0 {
            let detail = format!(
                "--replicas auto: {replicas} replica(s) connected, none acknowledging (hung, \
                 stopped or cut off): writes go unconfirmed until one is back"
            );
            let fix = "check the replicas (INFO replication: state=online, lag of 2 s at most)";
            return self.bad(Status::Warn, "replicas", node, detail, fix);
        }
        let detail = format!(
            "--replicas auto: {replicas} replica(s) connected, {acking} acknowledging; one \
             confirms each write"
        );
        self.pass("replicas", node, detail);
    }

    /// `maxmemory` with an evicting policy can drop a lock key early.
    fn eviction(&mut self, info: &Info, node: &str) {
        let maxmemory: u64 = info
            .get("maxmemory")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let policy = info
            .get("maxmemory_policy")
            .map(String::as_str)
            .unwrap_or("unknown");
        if maxmemory == 0 || policy == "noeviction" {
            let detail = match maxmemory {
                0 => format!("no maxmemory (maxmemory-policy {policy})"),
                n => format!("maxmemory {n} bytes with maxmemory-policy noeviction"),
            };
            return self.pass("eviction", node, detail);
        }
        let detail = format!(
            "maxmemory {maxmemory} bytes with maxmemory-policy {policy}: a lock key (it has a \
             TTL) can be evicted under memory pressure while its holder still runs"
        );
        let fix = "CONFIG SET maxmemory-policy noeviction (and put it in the server's \
                   configuration), or give the locks a server of their own";
        self.bad(Status::Fail, "eviction", node, detail, fix);
    }

    /// No AOF and no RDB snapshots: a restart forgets every lock and fence.
    fn persistence(&mut self, info: &Info, link: &mut Link, node: &str) {
        if info.get("aof_enabled").map(String::as_str) == Some("1") {
            return self.pass("persistence", node, "AOF is on".into());
        }
        let save = link
            .call(&["CONFIG", "GET", "save"])
            .ok()
            .and_then(|r| r.items().get(1).and_then(Reply::text));
        let fix = "appendonly yes (best), or RDB save points (save 3600 1 300 100 60 10000)";
        match save {
            Some(points) if !points.trim().is_empty() => self.pass(
                "persistence",
                node,
                format!("RDB snapshots (save {points}); AOF is off"),
            ),
            Some(_) => self.bad(
                Status::Warn,
                "persistence",
                node,
                "AOF and RDB are off: after a restart every lock is gone and fences restart \
                 from the clock"
                    .into(),
                fix,
            ),
            None => self.bad(
                Status::Warn,
                "persistence",
                node,
                "AOF is off and CONFIG GET save is refused, so RDB snapshots cannot be \
                 checked: without them a restart forgets every lock"
                    .into(),
                fix,
            ),
        }
    }

    /// Which protocol the server gets (`lock::protocol`), found without
    /// writing; where it is scripts, whether they may write (see
    /// [`Doctor::writes`]). Any other protocol WARNs: a plain lock runs
    /// without scripts, the features that need them are refused. Whether
    /// the server runs scripts.
    fn scripting(&mut self, link: &mut Link, node: &str) -> bool {
        let found = protocol::detect(&mut |args: &[&str]| link.call(args));
        let chosen = found.protocol();
        if chosen == protocol::Protocol::Scripts {
            self.pass("protocol", node, format!("scripts: {}", found.reason()));
            match self.writes(link) {
                Ok(()) => self.pass(
                    "scripting",
                    node,
                    "EVAL runs Lua scripts, and they may write".into(),
                ),
                Err((detail, fix)) => self.bad(Status::Fail, "writes", node, detail, fix),
            }
            return true;
        }
        let runs = match self.topology {
            Topology::Cluster => "no lock runs on a Redis Cluster endpoint without scripts \
                                  (a redirect would split a transaction)"
                .to_string(),
            _ => format!("a plain lock runs without scripts ({})", chosen.steps()),
        };
        let detail = format!(
            "{}: {}; {runs}; a semaphore (--limit), --queue newest-wins and --queue-max need \
             them and are refused (exit 77)",
            chosen.name(),
            found.reason(),
        );
        let fix = match found.scripting {
            Scripting::Denied => {
                "for those: give the user +eval (see REDIS PERMISSIONS in redlock-run(1); \
                 docs/compatibility.md)"
            }
            Scripting::Unloaded => {
                "for those: load the Lua module (Valkey 9.1: loadmodule of its lua module, or \
                 do not MODULE UNLOAD lua; docs/compatibility.md)"
            }
            _ => {
                "for those: enable Lua scripting (EVAL must not be renamed or disabled; on \
                 Valkey 9.1 the Lua module must be loaded)"
            }
        };
        self.bad(Status::Warn, "protocol", node, detail, fix);
        false
    }

    /// A script's write, as every lock script makes: a DEL of a key of
    /// the lock's that nothing uses (it changes nothing). A server that
    /// cannot persist (MISCONF: a failed RDB snapshot with
    /// stop-writes-on-bgsave-error, a failed AOF write) or is out of
    /// memory (OOM) refuses it, and every run's acquire with the same
    /// words (exit 77). Not allowed to the user: the rights line says so.
    fn writes(&mut self, link: &mut Link) -> Result<(), (String, &'static str)> {
        let probe = format!("{}:doctor", self.keys.lock);
        let script = "return redis.call('DEL', KEYS[1])";
        match link.call(&["EVAL", script, "1", &probe]) {
            // A replica, or a primary that does not serve the lock's slot:
            // the role and lock-slot lines say so.
            Err(Failed::Refused { code, message }) if elsewhere(&code, &message) => Ok(()),
            Err(Failed::Refused { code, message }) if !is_noperm(&code, &message) => {
                // Redis 6.2 wraps a script's error code in its own.
                let wrapped = |c: &str| code == c || message.contains(&format!("-{c} "));
                let fix = match ["MISCONF", "OOM"]
                    .into_iter()
                    .find(|c| wrapped(c))
                    .unwrap_or("")
                {
                    "MISCONF" => {
                        "the server cannot persist: see its log (a failed RDB snapshot or AOF \
                         write: disk full, permissions), fix the disk, then BGSAVE"
                    }
                    "OOM" => "free memory, or raise maxmemory (policy noeviction)",
                    _ => "see the server's words: every lock write fails the same way",
                };
                Err((
                    format!(
                        "a script's write was refused, so every run is too (Redis refused, \
                         exit 77): {message}"
                    ),
                    fix,
                ))
            }
            Err(Failed::Io(why)) => Err((
                format!("the connection broke while checking: {why}"),
                "check the server",
            )),
            _ => Ok(()),
        }
    }

    /// One server under two names (a port and a unix socket): the run
    /// refuses it (exit 2), in the same words.
    fn same_server(&mut self) {
        let ids = std::mem::take(&mut self.run_ids);
        for (i, (node, id)) in ids.iter().enumerate() {
            if let Some((first, _)) = ids[..i].iter().find(|(_, other)| other == id) {
                let detail = format!(
                    "'{node}' names the same server as '{first}' (run_id {}): each Redlock \
                     node must be an independent server",
                    untrusted(id)
                );
                let fix = "give each server once: as a port and as a unix socket it would \
                           count as two nodes, and every run exits 2";
                self.bad(Status::Fail, "same-server", node, detail, fix);
            }
        }
    }

    /// The commands redlock-run sends, and those its scripts call, for
    /// the connection's user: by `ACL DRYRUN` where the server has it and
    /// lets us, else by sending the harmless ones.
    fn rights(
        &mut self,
        server: &Server,
        link: &mut Link,
        node: &str,
        (needed, scripts): (Option<u32>, bool),
    ) {
        let k = self.keys.clone();
        let channel = k.wake_channel("doctor");
        let wait = needed != Some(0);
        let commands = rights_commands(&k, &channel, (wait, scripts), self.topology);
        let user = link
            .call(&["ACL", "WHOAMI"])
            .ok()
            .and_then(|r| r.text())
            .or_else(|| server.user())
            .unwrap_or_else(|| "default".into());
        let shown_user = untrusted(&user);
        let mut missing: Vec<String> = Vec::new();
        let mut dry = true;
        for command in &commands {
            let mut asked = vec!["ACL", "DRYRUN", user.as_str()];
            asked.extend(command.iter().copied());
            match link.call(&asked) {
                Ok(Reply::Text(ok)) if ok == "OK" => {}
                Ok(_) => missing.push(right(command)),
                Err(Failed::Refused { .. }) => {
                    dry = false;
                    missing = self.tried(server, link, &commands);
                    break;
                }
                Err(e) => {
                    let detail = format!("the connection broke while checking: {e}");
                    return self.bad(Status::Fail, "rights", node, detail, "check the server");
                }
            }
        }
        missing.dedup();
        self.rights_verdict(node, &shown_user, &missing, dry, (wait, scripts));
    }

    /// The `rights` line: what the user may not run, by which test.
    fn rights_verdict(
        &mut self,
        node: &str,
        shown_user: &str,
        missing: &[String],
        dry: bool,
        (wait, scripts): (bool, bool),
    ) {
        if missing.is_empty() {
            let also = match wait {
                true => ", INFO and WAIT (for --replicas)",
                false => "",
            };
            let run = match scripts {
                true => "EVAL, the scripts' commands",
                false => "WATCH/MULTI/EXEC, the lock's commands",
            };
            let detail = match dry {
                true => format!(
                    "user '{shown_user}' may run {run} on the lock's keys and \
                     PUBLISH/SUBSCRIBE on its channels{also} (by ACL DRYRUN)"
                ),
                false => format!(
                    "user '{shown_user}' may run {} on the lock's keys and PUBLISH/SUBSCRIBE \
                     on its channels{also} (by trying them: ACL DRYRUN is not available to this \
                     user, so the {} are checked only when they run)",
                    run.split(',').next().unwrap_or_default(),
                    match scripts {
                        true => "scripts' own commands",
                        false => "transactions' reads and writes",
                    }
                ),
            };
            return self.pass("rights", node, detail);
        }
        // A subcommand's right (`+cluster|slots`) is quoted for the shell.
        let plus: Vec<String> = missing
            .iter()
            .map(|c| match c.contains('|') {
                true => format!("'+{c}'"),
                false => format!("+{c}"),
            })
            .collect();
        let how = match dry {
            true => "ACL DRYRUN",
            false => "trying them",
        };
        let detail = format!(
            "user '{shown_user}' may not run: {} (by {how}); a run cannot take the lock",
            missing.join(", ")
        );
        let fix = format!(
            "ACL SETUSER {shown_user} {} (see REDIS PERMISSIONS in redlock-run(1) for the \
             whole rule, keys and channels included)",
            plus.join(" ")
        );
        self.bad(Status::Fail, "rights", node, detail, &fix);
    }

    /// Without `ACL DRYRUN`: send what changes nothing (EVAL of a script
    /// that touches no key, PUBLISH to a channel nobody hears, SUBSCRIBE,
    /// WATCH and MULTI on a connection of their own, EXEC without MULTI,
    /// UNWATCH, INFO, WAIT 0 0). The scripts' inner commands, and the
    /// transactions' reads and writes, cannot be checked this way.
    fn tried(&self, server: &Server, link: &mut Link, commands: &[Vec<&str>]) -> Vec<String> {
        let mut missing = Vec::new();
        for command in commands {
            let name = command[0];
            let result = match name {
                "EVAL" | "PUBLISH" | "INFO" | "WAIT" | "TIME" | "ROLE" | "PING" | "CLUSTER" => {
                    link.call(command)
                }
                // Allowed: EXEC without MULTI, an error of its own, or no
                // watch to drop.
                "EXEC" | "UNWATCH" => link.call(command),
                // A WATCH or a MULTI stays with its connection: on one of
                // their own, dropped after.
                "SUBSCRIBE" | "WATCH" | "MULTI" => server
                    .connect(self.timeout)
                    .and_then(|mut other| other.call(command)),
                _ => continue,
            };
            // A denied EXEC is "EXECABORT ... NOPERM", with or without MULTI.
            if let Err(Failed::Refused { code, message }) = result {
                if code == "NOPERM" || (code == "EXECABORT" && message.contains("NOPERM")) {
                    missing.push(right(command));
                }
            }
        }
        missing
    }

    /// This host's clock against the server's (`TIME`), within the
    /// uncertainty of the round trip.
    fn clock(&mut self, at: &Server, link: &mut Link, node: &str) {
        let mut timed = time_of(link);
        if let Err(Failed::Io(_)) = timed {
            // No answer in the per-node timeout: a slow link, which the
            // round-trip check tells. The offset is still worth knowing:
            // asked once more with time to spare (the round trip's
            // uncertainty is allowed for below).
            timed = at
                .connect(CLOCK_TIMEOUT)
                .and_then(|mut slow| time_of(&mut slow));
        }
        let (server, rtt, before, after) = match timed {
            Ok(timed) => timed,
            Err(Failed::Io(why)) => {
                let detail = format!(
                    "TIME got no answer within {}: the clock offset is unknown ({why})",
                    show(CLOCK_TIMEOUT)
                );
                let fix = "see the round-trip check: the link to this server is slow or lossy";
                return self.bad(Status::Warn, "clock", node, detail, fix);
            }
            Err(_) => return self.no_time(link, node),
        };
        let offset = server - (before + after) / 2;
        let beyond = offset
            .unsigned_abs()
            .saturating_sub(rtt.as_micros() / 2 + 1000);
        let beyond = Duration::from_micros(u64::try_from(beyond).unwrap_or(u64::MAX));
        let allowance = timing::drift(self.opts.ttl);
        let ahead = match offset >= 0 {
            true => "ahead of",
            false => "behind",
        };
        let shown = Duration::from_micros(u64::try_from(offset.unsigned_abs()).unwrap_or(u64::MAX));
        let detail = format!(
            "the server's clock is {} {ahead} this host's (drift allowance of --ttl {}: {})",
            fine(shown),
            show(self.opts.ttl),
            show(allowance)
        );
        let fix = "run NTP (chrony, systemd-timesyncd) on this host and on the server";
        if beyond > self.opts.ttl {
            self.bad(
                Status::Fail,
                "clock",
                node,
                detail
                    + ": more than a whole TTL, so holders' \
                times in status and fences seeded after a data loss are wrong by more than a lease",
                fix,
            );
        } else if beyond > allowance {
            self.bad(Status::Warn, "clock", node, detail, fix);
        } else {
            self.pass("clock", node, detail);
        }
    }

    /// TIME did not answer: a FAIL when it fails inside a script too (it
    /// is renamed or disabled, and the lock scripts call it), else a
    /// WARN (refused to the user: the rights line fails already).
    fn no_time(&mut self, link: &mut Link, node: &str) {
        if let Some(words) = time_fails_in_scripts(link) {
            let detail = format!(
                "TIME fails in a script, and the lock scripts call it: every run is refused \
                 (Redis refused, exit 77): {words}"
            );
            let fix = "give the server its TIME back (a rename-command TIME in its configuration)";
            return self.bad(Status::Fail, "clock", node, detail, fix);
        }
        self.bad(
            Status::Warn,
            "clock",
            node,
            "TIME did not answer: the clock offset is unknown".into(),
            "grant +time to the Redis user (the scripts call TIME)",
        );
    }

    /// A Sentinel service: every sentinel answers and names the same
    /// master; the master's replicas; then the master's own checks.
    fn sentinel(&mut self, sentinels: &[Server], service: &str, data: &Server, node: &str) {
        let Answers {
            named,
            dead,
            replicas,
        } = self.ask_sentinels(sentinels, service);
        let Some((host, port)) = self.sentinel_master(sentinels.len(), named, dead, service, node)
        else {
            return;
        };
        let needed = self.needed(true);
        if let Some(healthy) = replicas {
            self.sentinel_replicas(healthy, needed, service, node);
        }
        let master = data.at(&host, port);
        let shown = format!("{node} ({host}:{port})");
        let link = master.connect(self.timeout);
        self.server(&master, link, &shown, needed);
    }

    /// Each sentinel's master for `service` (or none, or why it did not
    /// answer), and the healthy replicas the first to answer sees: every
    /// sentinel asked in one round (see `probe::call_each`).
    fn ask_sentinels(&self, sentinels: &[Server], service: &str) -> Answers {
        let servers: Vec<&Server> = sentinels.iter().collect();
        let mut made = probe::connect_each(&servers, self.timeout);
        let asked = &["SENTINEL", "get-master-addr-by-name", service];
        let answers = call_made(&mut made, asked);
        let replicas = (made.iter_mut().zip(&answers))
            .filter(|(_, answer)| answer.is_ok())
            .filter_map(|(link, _)| link.as_mut().ok())
            .find_map(|link| link.call(&["SENTINEL", "replicas", service]).ok())
            .map(|list| list.items().iter().filter(|r| healthy(r)).count());
        let mut named: Vec<(String, Option<(String, u16)>)> = Vec::new();
        let mut dead: Vec<String> = Vec::new();
        for (sentinel, answer) in sentinels.iter().zip(answers) {
            match answer {
                Ok(reply) => {
                    let items = reply.items();
                    let at = match (
                        items.first().and_then(Reply::text),
                        items.get(1).and_then(Reply::int),
                    ) {
                        (Some(host), Some(port)) => u16::try_from(port).ok().map(|p| (host, p)),
                        _ => None,
                    };
                    named.push((sentinel.address.clone(), at));
                }
                Err(e) => dead.push(format!("{} ({e})", sentinel.address)),
            }
        }
        Answers {
            named,
            dead,
            replicas,
        }
    }

    /// The `sentinels` line: the master they agree on, or None (reported)
    /// if none is named or they disagree.
    fn sentinel_master(
        &mut self,
        total: usize,
        named: Vec<(String, Option<(String, u16)>)>,
        dead: Vec<String>,
        service: &str,
        node: &str,
    ) -> Option<(String, u16)> {
        let masters: Vec<&(String, u16)> = named.iter().filter_map(|(_, m)| m.as_ref()).collect();
        let mut distinct: Vec<&(String, u16)> = masters.clone();
        distinct.sort();
        distinct.dedup();
        let unknown: Vec<&str> = named
            .iter()
            .filter(|(_, m)| m.is_none())
            .map(|(a, _)| a.as_str())
            .collect();
        if masters.is_empty() {
            let detail = match named.is_empty() {
                true => format!("no sentinel answered: {}", dead.join("; ")),
                false => format!(
                    "service '{service}' is unknown to the sentinels that answered ({})",
                    unknown.join(", ")
                ),
            };
            let fix = "check the sentinels' addresses and the service name in the URL";
            self.out_of_reach(Exit::Unavailable, "sentinels", node, detail, fix);
            return None;
        }
        if distinct.len() > 1 {
            let list: Vec<String> = named
                .iter()
                .map(|(a, m)| match m {
                    Some((h, p)) => format!("{a} names {h}:{p}"),
                    None => format!("{a} names none"),
                })
                .collect();
            let detail = format!(
                "the sentinels disagree on the master of '{service}': {}",
                list.join(", ")
            );
            let fix = "wait for the failover to end, then check that every sentinel monitors \
                       the same master with the same name";
            self.bad(Status::Fail, "sentinels", node, detail, fix);
            return None;
        }
        let (host, port) = distinct[0].clone();
        let detail = format!(
            "{} of {total} sentinels answer and name {host}:{port} as master of '{service}'",
            masters.len()
        );
        self.sentinels_answered(detail, &dead, &unknown, service, node);
        Some((host, port))
    }

    /// All sentinels answered (pass), or some did not (warn).
    fn sentinels_answered(
        &mut self,
        detail: String,
        dead: &[String],
        unknown: &[&str],
        service: &str,
        node: &str,
    ) {
        if dead.is_empty() && unknown.is_empty() {
            self.pass("sentinels", node, detail);
        } else {
            let mut missing = dead.to_vec();
            missing.extend(
                unknown
                    .iter()
                    .map(|a| format!("{a} (does not know '{service}')")),
            );
            let fix = "bring every sentinel back (a failover needs a majority of them)";
            self.bad(
                Status::Warn,
                "sentinels",
                node,
                format!("{detail}; not: {}", missing.join("; ")),
                fix,
            );
        }
    }

    /// The `sentinel-replicas` line: enough healthy replicas for --replicas.
    fn sentinel_replicas(
        &mut self,
        healthy: usize,
        needed: Option<u32>,
        service: &str,
        node: &str,
    ) {
        let want = usize::try_from(needed.unwrap_or(1)).unwrap_or(usize::MAX);
        let detail = format!(
            "the sentinels see {healthy} healthy replica(s) of '{service}'; --replicas {} needs {want}",
            match needed {
                Some(n) => n.to_string(),
                None => "auto".into(),
            }
        );
        if healthy >= want {
            self.pass("sentinel-replicas", node, detail);
        } else if needed.is_none() {
            let fix = "add a replica: without one a failover cannot keep the lock";
            self.bad(Status::Warn, "sentinel-replicas", node, detail, fix);
        } else {
            self.bad(
                Status::Fail,
                "sentinel-replicas",
                node,
                detail,
                "add replicas, or lower --replicas",
            );
        }
    }

    /// A Cluster: every slot served, the lock's slot's primary answers;
    /// then each primary's own checks.
    fn cluster(&mut self, seeds: &[Server], node: &str) {
        let primaries = match probe::primaries(seeds, self.timeout) {
            Ok(p) => p,
            // The right is missing, not the seeds: say which, as `rights`.
            Err(Failed::Refused { code, message }) if is_noperm(&code, &message) => {
                let user = seeds.first().and_then(Server::user);
                let user = untrusted(&user.unwrap_or_else(|| "default".into()));
                let missing = ["cluster|slots".to_string()];
                return self.rights_verdict(node, &user, &missing, false, (false, true));
            }
            Err(e) => {
                let detail = format!("no seed node answered CLUSTER SLOTS: {e}");
                let fix =
                    "check the seed addresses in the URL (and that the nodes run in cluster mode)";
                return self.out_of_reach(Exit::Unavailable, "cluster", node, detail, fix);
            }
        };
        self.slots_served(&primaries, node);
        self.lock_slot(&primaries, node);
        let needed = self.needed(true);
        // Every primary is connected to at once (see `probe::connect_each`).
        let servers: Vec<&Server> = primaries.iter().map(|p| &p.server).collect();
        let made = probe::connect_each(&servers, self.timeout);
        for (p, link) in primaries.iter().zip(made) {
            let shown = format!("{node} ({})", p.server.address);
            self.server(&p.server, link, &shown, needed);
        }
    }

    /// The `slots` line: every one of the 16384 slots has a primary.
    fn slots_served(&mut self, primaries: &[Primary], node: &str) {
        let mut served = vec![false; 16384];
        for p in primaries {
            for range in &p.slots {
                for slot in range.clone() {
                    if let Some(s) = served.get_mut(usize::from(slot)) {
                        *s = true;
                    }
                }
            }
        }
        let gaps = gaps(&served);
        let uncovered: usize = served.iter().filter(|s| !**s).count();
        if uncovered == 0 {
            let detail = format!(
                "all 16384 slots are served by {} primaries",
                primaries.len()
            );
            self.pass("slots", node, detail);
        } else {
            let detail = format!(
                "{uncovered} slot(s) are served by no primary: {}; locks there cannot be taken",
                gaps.join(", ")
            );
            let fix = "assign the slots (valkey-cli/redis-cli --cluster fix HOST:PORT)";
            self.bad(Status::Fail, "slots", node, detail, fix);
        }
    }

    /// The `lock-slot` line: the lock's slot has a primary, and it answers.
    fn lock_slot(&mut self, primaries: &[Primary], node: &str) {
        let slot = self.keys.slot();
        let owner = primaries
            .iter()
            .find(|p| p.slots.iter().any(|r| r.contains(&slot)));
        match owner {
            None => {
                let detail = format!("no primary serves slot {slot} of lock '{}'", self.opts.key);
                let fix = "assign the slot (redis-cli --cluster fix HOST:PORT)";
                self.bad(Status::Fail, "lock-slot", node, detail, fix);
            }
            Some(p) => {
                let reach = p
                    .server
                    .connect(self.timeout)
                    .and_then(|mut l| l.call(&["PING"]));
                match reach {
                    Ok(_) => self.pass(
                        "lock-slot",
                        node,
                        format!(
                            "slot {slot} of lock '{}' is served by {}, which answers",
                            self.opts.key, p.server.address
                        ),
                    ),
                    Err(e) => self.bad(
                        Status::Fail,
                        "lock-slot",
                        node,
                        format!(
                            "slot {slot} of lock '{}' is served by {}, which does not answer: {e}",
                            self.opts.key, p.server.address
                        ),
                        "bring the primary back, or let a replica take over",
                    ),
                }
            }
        }
    }
}

/// The commands `rights` checks: those redlock-run sends and those its
/// scripts call, on the lock's keys and channel (INFO and WAIT if `wait`).
/// A refusal for want of a right (NOPERM; Valkey words it inside a
/// script without the code).
fn is_noperm(code: &str, message: &str) -> bool {
    code == "NOPERM" || message.contains("NOPERM") || message.contains("no permissions")
}

/// A write refused because it belongs elsewhere: a replica's READONLY, a
/// Cluster's redirections. Redis 6.2 wraps a script's error in its own
/// (`ERR Error running script ... -READONLY ...`): its words count too.
fn elsewhere(code: &str, message: &str) -> bool {
    const CODES: [&str; 5] = ["READONLY", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"];
    CODES.contains(&code) || CODES.iter().any(|c| message.contains(&format!("-{c} ")))
}

/// The server's words when TIME fails inside a script for another reason
/// than a right (renamed or disabled): what the acquire script meets.
fn time_fails_in_scripts(link: &mut Link) -> Option<String> {
    match link.call(&["EVAL", "return redis.call('TIME')", "0"]) {
        Err(Failed::Refused { code, message }) if !is_noperm(&code, &message) => Some(message),
        _ => None,
    }
}

/// The ACL right a command needs: its name, or `name|sub` for a command
/// with subcommands that the documented line grants one by one.
fn right(command: &[&str]) -> String {
    match command {
        ["CLUSTER", sub, ..] => format!("cluster|{}", sub.to_lowercase()),
        [name, ..] => name.to_lowercase(),
        [] => String::new(),
    }
}

/// The commands a run sends: with `scripts`, EVAL and what the scripts
/// run; without, the transactions' (see `lock::txn`).
fn rights_commands<'a>(
    k: &'a LockKeys,
    channel: &'a str,
    (wait, scripts): (bool, bool),
    topology: Topology,
) -> Vec<Vec<&'a str>> {
    let mut commands: Vec<Vec<&str>> = match scripts {
        true => vec![vec!["EVAL", "return 1", "2", &k.lock, &k.waiters]],
        false => vec![
            vec!["WATCH", &k.lock],
            vec!["UNWATCH"],
            vec!["MULTI"],
            vec!["EXEC"],
        ],
    };
    commands.extend([
        vec!["GET", &k.lock],
        vec!["PTTL", &k.lock],
        vec!["SET", &k.lock, "x"],
        vec!["DEL", &k.lock],
        vec!["PEXPIRE", &k.lock, "1000"],
        vec!["INCR", &k.fence],
        vec!["HSET", &k.holder, "f", "v"],
        vec!["HGETALL", &k.holder],
        vec!["HMGET", &k.holder, "f"],
        vec!["EXISTS", &k.waiters],
        vec!["ZADD", &k.waiters, "1", "m"],
        vec!["ZRANGE", &k.waiters, "0", "-1"],
        vec!["ZREM", &k.waiters, "m"],
        vec!["TIME"],
        vec!["PUBLISH", channel, ""],
        vec!["SUBSCRIBE", channel],
    ]);
    if wait {
        commands.push(vec!["INFO", "replication"]);
        commands.push(vec!["WAIT", "0", "0"]);
    }
    match topology {
        Topology::Plain => {}
        // The master a sentinel names is checked with ROLE.
        Topology::Sentinel => commands.push(vec!["ROLE"]),
        // redis-rs finds the slots with CLUSTER SLOTS and checks nodes with PING.
        Topology::Cluster => {
            commands.push(vec!["PING"]);
            commands.push(vec!["CLUSTER", "SLOTS"]);
        }
    }
    commands
}

/// `args` on each connection `made` in one round (see `probe::call_each`);
/// a connection that could not be made: why, as its answer.
fn call_made(made: &mut [Result<Link, Failed>], args: &[&str]) -> Vec<Result<Reply, Failed>> {
    let mut links: Vec<&mut Link> = made.iter_mut().filter_map(|m| m.as_mut().ok()).collect();
    let mut replies = probe::call_each(&mut links, args).into_iter();
    (made.iter())
        .map(|m| match m {
            Ok(_) => (replies.next()).unwrap_or_else(|| Err(Failed::Io("not asked".into()))),
            Err(e) => Err(e.clone()),
        })
        .collect()
}

/// What the sentinels said: (address, master named), those that did not
/// answer, and the healthy replicas seen.
struct Answers {
    named: Vec<(String, Option<(String, u16)>)>,
    dead: Vec<String>,
    replicas: Option<usize>,
}

/// A replica in `SENTINEL replicas`: not down, and its link up.
fn healthy(replica: &Reply) -> bool {
    let fields: Vec<String> = replica
        .items()
        .iter()
        .map(|r| r.text().unwrap_or_default())
        .collect();
    let get = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair.first().map(String::as_str) == Some(name))
            .and_then(|pair| pair.get(1).cloned())
            .unwrap_or_default()
    };
    let flags = get("flags");
    !flags.contains("s_down")
        && !flags.contains("o_down")
        && !flags.contains("disconnected")
        && get("master-link-status") == "ok"
}

/// The unserved slots as ranges, `a-b`, the first few.
fn gaps(served: &[bool]) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, s) in served.iter().chain([&true]).enumerate() {
        match (s, start) {
            (false, None) => start = Some(i),
            (true, Some(a)) => {
                out.push(match i - 1 == a {
                    true => a.to_string(),
                    false => format!("{a}-{}", i - 1),
                });
                start = None;
            }
            _ => {}
        }
    }
    if out.len() > 5 {
        let more = out.len() - 5;
        out.truncate(5);
        out.push(format!("and {more} more range(s)"));
    }
    out
}

/// How long the clock check waits for TIME when the per-node timeout
/// was not enough.
const CLOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// The server's TIME in microseconds, the round trip's length, and this
/// host's clock just before and after it.
fn time_of(link: &mut Link) -> Result<(i128, Duration, i128, i128), Failed> {
    let before = host_micros();
    let sent = Instant::now();
    let reply = link.call(&["TIME"])?;
    let rtt = sent.elapsed();
    let after = host_micros();
    let items = reply.items();
    let server = (|| {
        Some(i128::from(items.first()?.int()?) * 1_000_000 + i128::from(items.get(1)?.int()?))
    })();
    let server = server.ok_or_else(|| Failed::Refused {
        code: "ERR".into(),
        message: "TIME's answer is not two integers".into(),
    })?;
    Ok((server, rtt, before, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_ranges() {
        let mut served = vec![true; 10];
        served[2] = false;
        served[5] = false;
        served[6] = false;
        served[9] = false;
        assert_eq!(gaps(&served), ["2", "5-6", "9"]);
        assert!(gaps(&[true; 4]).is_empty());
    }

    #[test]
    fn info_is_parsed_by_field() {
        let info = parse_info("# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n");
        assert_eq!(info.get("server_name").map(String::as_str), Some("valkey"));
    }
}
