//! Real Sentinel and Cluster topologies built from throwaway `RedisServer`s:
//! every node and sentinel on its own free loopback port and temp dir, all of
//! them killed when the topology is dropped. Waits poll real state (INFO,
//! SENTINEL, CLUSTER NODES) with generous timeouts and panic with log tails.
//!
//! Both use `$REDLOCK_TEST_REDIS_SERVER` (sentinels too) and the cluster is
//! created with `$REDLOCK_TEST_REDIS_CLI`, so the suite runs on Redis 6.2 too.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::process::Command;
use std::time::{Duration, Instant};

use super::run::run_with_timeout;
use super::server::*;

/// The service name every `SentinelSet` monitors.
pub const SENTINEL_SERVICE: &str = "mymaster";

/// Sentinel `down-after-milliseconds`: how long a silent primary takes to be
/// subjectively down.
pub const SENTINEL_DOWN_AFTER: Duration = Duration::from_millis(1000);
/// Sentinel `failover-timeout`: bounds an election, and a failed failover is
/// retried after twice this.
pub const SENTINEL_FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);
/// `cluster-node-timeout`: how long a silent cluster node takes to be suspected.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1500);

/// Upper bound of every wait on a topology (start, failover, migration).
pub const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(45);

const POLL: Duration = Duration::from_millis(50);
const LOG_TAIL: usize = 40;
const CLUSTER_SLOTS: usize = 16384;

// Replicas sync at once instead of after Redis 7's 5 s diskless-sync delay.
const DATA_NODE_CONFIG: &str = "repl-diskless-sync yes\nrepl-diskless-sync-delay 0\n";

// ---------------------------------------------------------------- helpers --

/// A connection for polling: short timeouts, None if the node does not answer
/// (killed, paused, not yet listening).
fn try_conn(port: u16) -> Option<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let conn = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    conn.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    Some(conn)
}

fn try_query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    cmd.query(&mut try_conn(port)?).ok()
}

/// Like `try_query`, but a failure panics: for commands the harness relies on.
fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let mut conn = try_conn(port).unwrap_or_else(|| panic!("connect to 127.0.0.1:{port}"));
    cmd.query(&mut conn)
        .unwrap_or_else(|e| panic!("{cmd:?} on port {port}: {e}"))
}

/// `INFO section` as key -> value; None if the node does not answer.
fn info(port: u16, section: &str) -> Option<HashMap<String, String>> {
    let text: String = try_query(port, redis::cmd("INFO").arg(section))?;
    Some(parse_fields(&text))
}

/// `CLUSTER INFO` as key -> value; None if the node does not answer.
fn cluster_info(port: u16) -> Option<HashMap<String, String>> {
    let text: String = try_query(port, redis::cmd("CLUSTER").arg("INFO"))?;
    Some(parse_fields(&text))
}

fn parse_fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Whether the node answers and says `role:master`.
fn is_master(port: u16) -> bool {
    info(port, "replication").is_some_and(|i| i.get("role").map(String::as_str) == Some("master"))
}

/// Whether the node answers, is a replica of `primary`, and its link is up.
fn replicates_from(port: u16, primary: u16) -> bool {
    info(port, "replication").is_some_and(|i| {
        let get = |k: &str| i.get(k).map(String::as_str);
        get("role") == Some("slave")
            && get("master_port") == Some(primary.to_string().as_str())
            && get("master_link_status") == Some("up")
    })
}

/// Poll `probe` every 50 ms until it returns Some; after `timeout`, panic
/// naming `what` and showing `logs()`.
fn wait_for<T>(
    what: &str,
    timeout: Duration,
    logs: impl Fn() -> String,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("{what}: still not so after {timeout:?}\n{}", logs());
        }
        std::thread::sleep(POLL);
    }
}

/// The last `LOG_TAIL` lines of each node's log: enough to follow a failover.
fn log_tails<'a>(nodes: impl Iterator<Item = (&'a str, &'a RedisServer)>) -> String {
    nodes
        .map(|(kind, s)| {
            let state = if s.is_running() { "running" } else { "stopped" };
            let log = s.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL)..].join("\n");
            format!("--- {kind} {} ({state}) log tail ---\n{tail}\n", s.port())
        })
        .collect()
}

/// Start `n` servers from `make` concurrently.
fn start_many(n: usize, make: impl Fn() -> RedisServer + Sync) -> Vec<RedisServer> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|_| s.spawn(&make)).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("starting a redis-server panicked"))
            .collect()
    })
}

// --------------------------------------------------------------- Sentinel --

/// Sentinel's internal periods, shortened with `SENTINEL DEBUG` (Redis 7.0+;
/// on older servers the defaults stay, and demoting a returning old primary
/// then takes 10-20 s instead of 2-3 s):
/// - `info-period` 1000 ms (default 10 s): how often sentinels INFO replicas;
/// - `publish-period` 500 ms (default 2 s): hello messages, so sentinels find
///   each other sooner, and a node that wrongly claims to be primary is
///   demoted after 4 publish periods (2 s instead of 8 s).
///
/// A sentinel that is `restart()`ed is back to the defaults.
const SENTINEL_DEBUG: [(&str, u32); 2] = [("info-period", 1000), ("publish-period", 500)];

fn tune_sentinel(port: u16) {
    let mut cmd = redis::cmd("SENTINEL");
    cmd.arg("DEBUG");
    for (param, ms) in SENTINEL_DEBUG {
        cmd.arg(param).arg(ms);
    }
    if let Err(e) = cmd.exec(&mut try_conn(port).expect("connect to a new sentinel")) {
        eprintln!("note: sentinel {port} keeps its default periods ({e})");
    }
}

/// One primary, two replicas and three sentinels (quorum 2) monitoring
/// `SENTINEL_SERVICE`. Data nodes have a writable config file, so the
/// sentinels' `CONFIG REWRITE` persists `replicaof` as in production.
pub struct SentinelSet {
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// Start everything; returns once both replicas are in sync with the
    /// primary and every sentinel names the primary, sees both replicas as
    /// healthy and knows the two other sentinels (so a failover can be
    /// authorised). Takes under a second on Redis 7.
    pub fn start() -> SentinelSet {
        let primary = RedisServer::builder().config(DATA_NODE_CONFIG).start();
        let p = primary.port();
        let replica_config = format!("{DATA_NODE_CONFIG}replicaof 127.0.0.1 {p}\n");
        let replicas = start_many(2, || RedisServer::builder().config(&replica_config).start());
        let mut set = SentinelSet {
            data: std::iter::once(primary).chain(replicas).collect(),
            sentinels: Vec::new(),
        };
        // Sentinels learn the replicas from the primary's INFO when they
        // connect; later INFO comes only every 10 s, so sync them first.
        set.wait_replicas_connected(p);

        let sentinel_config = format!(
            "sentinel resolve-hostnames no\n\
             sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {p} 2\n\
             sentinel down-after-milliseconds {SENTINEL_SERVICE} {}\n\
             sentinel failover-timeout {SENTINEL_SERVICE} {}\n\
             sentinel parallel-syncs {SENTINEL_SERVICE} 1\n",
            SENTINEL_DOWN_AFTER.as_millis(),
            SENTINEL_FAILOVER_TIMEOUT.as_millis(),
        );
        set.sentinels = start_many(3, || {
            RedisServer::builder()
                .config(&sentinel_config)
                .sentinel()
                .start()
        });
        for s in &set.sentinels {
            tune_sentinel(s.port());
        }
        set.wait_sentinels_agree(p);
        set
    }

    pub fn service(&self) -> &'static str {
        SENTINEL_SERVICE
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_SERVICE}", hosts.join(","))
    }

    /// Ports of the three sentinels, killed or not, in start order.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisServer::port).collect()
    }

    /// Ports of the three data nodes, killed or not, in start order (the
    /// first was the initial primary).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisServer::port).collect()
    }

    /// The data node on `port` (to pause, kill, restart or connect to it).
    pub fn data_node(&mut self, port: u16) -> &mut RedisServer {
        self.data
            .iter_mut()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// Sentinel number `i` (0..3). After `restart()` it runs with the default
    /// periods (see `SENTINEL_DEBUG`).
    pub fn sentinel(&mut self, i: usize) -> &mut RedisServer {
        &mut self.sentinels[i]
    }

    /// The primary's port as the running sentinels name it
    /// (`SENTINEL get-master-addr-by-name`); waits until they agree.
    pub fn primary(&self) -> u16 {
        wait_for(
            "running sentinels agree on the primary",
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || self.named_primary(),
        )
    }

    /// The data nodes other than the one sentinels name as primary.
    pub fn replicas(&self) -> Vec<u16> {
        let p = self.primary();
        self.data_ports().into_iter().filter(|&r| r != p).collect()
    }

    /// A plain connection (5 s timeouts) to the current primary, after
    /// checking that it says `role:master`.
    pub fn primary_conn(&self) -> redis::Connection {
        let p = self.primary();
        wait_for(
            &format!("primary {p} reports role:master"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || is_master(p).then_some(()),
        );
        self.data.iter().find(|s| s.port() == p).unwrap().conn()
    }

    /// A plain connection to the data node on `port` (a replica or the
    /// primary).
    pub fn data_conn(&self, port: u16) -> redis::Connection {
        self.data
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
            .conn()
    }

    /// Fail over with `SENTINEL FAILOVER` (no agreement needed) and wait until
    /// another node is primary, the sentinels agree, and both other data nodes
    /// (the old primary included) replicate from it. Returns the new primary.
    pub fn failover(&mut self) -> u16 {
        let (old, _) = self.start_failover();
        let new = self.wait_for_new_primary(old, TOPOLOGY_TIMEOUT);
        self.wait_replicas_connected(new);
        self.wait_sentinels_agree(new);
        new
    }

    /// `SENTINEL FAILOVER`, returning (old, new) as soon as every running
    /// sentinel names the new primary and it says `role:master`: the old
    /// primary is then usually still a master that accepts writes (Sentinel
    /// demotes it seconds later), a stale primary. `failover` waits for the
    /// rest.
    pub fn start_failover(&mut self) -> (u16, u16) {
        let old = self.primary();
        let sentinel = self.running_sentinel();
        // Right after a previous failover a sentinel may answer INPROG or
        // NOGOODSLAVE for a moment; retry those.
        wait_for(
            "SENTINEL FAILOVER accepted",
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || {
                let mut conn = try_conn(sentinel)?;
                match redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(SENTINEL_SERVICE)
                    .query::<String>(&mut conn)
                {
                    Ok(_) => Some(()),
                    Err(e) if e.to_string().contains("INPROG") => Some(()),
                    Err(_) => None,
                }
            },
        );
        let new = wait_for(
            &format!("every sentinel names a primary other than {old}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || self.named_primary().filter(|&p| p != old && is_master(p)),
        );
        (old, new)
    }

    /// Whether the data node on `port` answers and says `role:master`.
    pub fn says_master(&self, port: u16) -> bool {
        is_master(port)
    }

    /// SIGKILL the current primary and return its port at once; the
    /// sentinels notice after `SENTINEL_DOWN_AFTER` (see `wait_for_new_primary`).
    pub fn kill_primary(&mut self) -> u16 {
        let old = self.primary();
        self.data_node(old).kill();
        old
    }

    /// Restart the killed data node `old` as a replica of the current
    /// primary (its config file gets that `replicaof`, as an operator or the
    /// sentinels' rewrite would leave it) and wait until it is in sync and
    /// every sentinel sees it as a healthy replica again.
    pub fn restart_as_replica(&mut self, old: u16) {
        let primary = self.primary();
        assert_ne!(old, primary, "{old} is the primary");
        let node = self.data_node(old);
        let conf = node.config_file().expect("data nodes have a config file");
        let text = std::fs::read_to_string(&conf).expect("read data node config");
        let mut kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("replicaof ") && !l.starts_with("slaveof "))
            .collect();
        let line = format!("replicaof 127.0.0.1 {primary}");
        kept.push(&line);
        std::fs::write(&conf, kept.join("\n") + "\n").expect("write data node config");
        node.restart();
        self.wait_replicas_connected(primary);
        self.wait_sentinels_agree(primary);
    }

    /// SIGSTOP the current primary and wait until the sentinels have promoted
    /// another node. Returns (old, new); the old one stays paused until
    /// `resume_as_replica(old)`.
    pub fn pause_primary_past_down_after(&mut self) -> (u16, u16) {
        let old = self.primary();
        self.data_node(old).pause();
        let new = self.wait_for_new_primary(old, TOPOLOGY_TIMEOUT);
        (old, new)
    }

    /// SIGCONT the paused old primary and wait until the sentinels have turned
    /// it into a replica of the current primary and it is in sync. Until then
    /// (2-3 s on Redis 7, see `SENTINEL_DEBUG`) it says `role:master` and
    /// accepts writes: a stale primary.
    pub fn resume_as_replica(&mut self, old: u16) {
        self.data_node(old).resume();
        let primary = self.primary();
        self.wait_replicas_connected(primary);
        self.wait_sentinels_agree(primary);
    }

    /// SIGKILL sentinel number `i` (0..3); the others carry on.
    pub fn kill_sentinel(&mut self, i: usize) {
        self.sentinels[i].kill();
    }

    /// Wait until the failover away from `old` has ended on every running
    /// sentinel (each has switched to the same new primary, which is neither
    /// down nor still being failed over) and that node says `role:master`;
    /// returns its port.
    ///
    /// Clients already see the promoted node a moment earlier, while the
    /// leading sentinel still reconfigures the replicas. Bringing `old` back
    /// in that window makes Redis 7.0 sentinels see it "+reboot" as the
    /// master being failed over and then fail the new primary over again,
    /// so this waits for `+failover-end` everywhere.
    pub fn wait_for_new_primary(&self, old: u16, timeout: Duration) -> u16 {
        wait_for(
            &format!("sentinels promote a replica of {old}"),
            timeout,
            || self.logs(),
            || {
                let p = self.named_primary()?;
                let done = p != old && self.switched_to(p) && is_master(p);
                done.then_some(p)
            },
        )
    }

    /// Wait until every running data node other than `primary` replicates
    /// from it with its link up, and `primary` says `role:master`.
    pub fn wait_replicas_connected(&self, primary: u16) {
        wait_for(
            &format!("every running data node replicates from {primary}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || {
                let ok = is_master(primary)
                    && self
                        .data
                        .iter()
                        .filter(|s| s.port() != primary && s.is_running())
                        .all(|s| replicates_from(s.port(), primary));
                ok.then_some(())
            },
        );
    }

    /// Log tails of every data node and sentinel, for failure messages.
    pub fn logs(&self) -> String {
        let data = self.data.iter().map(|s| ("data node", s));
        log_tails(data.chain(self.sentinels.iter().map(|s| ("sentinel", s))))
    }

    /// The port every running sentinel names, if they all answer and agree.
    fn named_primary(&self) -> Option<u16> {
        let mut named = None;
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            let addr: Option<(String, String)> = try_query(
                s.port(),
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(SENTINEL_SERVICE),
            )?;
            let port: u16 = addr?.1.parse().ok()?;
            if *named.get_or_insert(port) != port {
                return None;
            }
        }
        named
    }

    /// Whether every running sentinel monitors `primary` as a healthy master
    /// with no failover in progress.
    fn switched_to(&self, primary: u16) -> bool {
        self.sentinels.iter().filter(|s| s.is_running()).all(|s| {
            try_query::<HashMap<String, String>>(
                s.port(),
                redis::cmd("SENTINEL").arg("MASTER").arg(SENTINEL_SERVICE),
            )
            .is_some_and(|m| {
                m.get("port") == Some(&primary.to_string())
                    && m.get("flags").map(String::as_str) == Some("master")
            })
        })
    }

    fn running_sentinel(&self) -> u16 {
        self.sentinels
            .iter()
            .find(|s| s.is_running())
            .expect("no sentinel running")
            .port()
    }

    /// Wait until every running sentinel names `primary` as a healthy master,
    /// sees every running data node but it as a healthy replica, and knows the
    /// other running sentinels.
    fn wait_sentinels_agree(&self, primary: u16) {
        let replicas: Vec<u16> = self
            .data
            .iter()
            .filter(|s| s.port() != primary && s.is_running())
            .map(RedisServer::port)
            .collect();
        let sentinels: Vec<u16> = self
            .sentinels
            .iter()
            .filter(|s| s.is_running())
            .map(RedisServer::port)
            .collect();
        wait_for(
            &format!("sentinels agree on primary {primary} with replicas {replicas:?}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || {
                for &s in &sentinels {
                    let master: HashMap<String, String> = try_query(
                        s,
                        redis::cmd("SENTINEL").arg("MASTER").arg(SENTINEL_SERVICE),
                    )?;
                    let field = |k: &str| master.get(k).map(String::as_str);
                    if field("port") != Some(primary.to_string().as_str())
                        || field("flags") != Some("master")
                        || field("num-other-sentinels").and_then(|n| n.parse().ok())
                            < Some(sentinels.len() - 1)
                    {
                        return None;
                    }
                    let seen: Vec<HashMap<String, String>> = try_query(
                        s,
                        redis::cmd("SENTINEL").arg("REPLICAS").arg(SENTINEL_SERVICE),
                    )?;
                    let healthy = |r: u16| {
                        seen.iter().any(|m| {
                            let f = |k: &str| m.get(k).map(String::as_str);
                            f("port") == Some(r.to_string().as_str())
                                && f("flags") == Some("slave")
                                && f("master-link-status") == Some("ok")
                                && f("master-port") == Some(primary.to_string().as_str())
                        })
                    };
                    if !replicas.iter().all(|&r| healthy(r)) {
                        return None;
                    }
                }
                Some(())
            },
        );
    }
}

// ---------------------------------------------------------------- Cluster --

/// A Redis Cluster of 3 primaries and 3 replicas, created with
/// `redis-cli --cluster create ... --cluster-replicas 1`. Each node keeps its
/// `nodes.conf` in its temp dir, so a killed node can `restart()` and rejoin.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    seeds: Vec<u16>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct ClusterNode {
    id: String,
    port: u16,
    master: bool,
    failed: bool,
    primary_id: Option<String>,
    slots: Vec<(usize, usize)>,
}

/// Cluster nodes as (port, port of its primary if it is a replica).
type Roles = Vec<(u16, Option<u16>)>;

/// `CLUSTER NODES` of the node on `port`; None if it does not answer.
fn cluster_nodes(port: u16) -> Option<Vec<ClusterNode>> {
    let text: String = try_query(port, redis::cmd("CLUSTER").arg("NODES"))?;
    text.lines().map(parse_cluster_node).collect()
}

// <id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
fn parse_cluster_node(line: &str) -> Option<ClusterNode> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let addr = f.get(1)?.split(['@', ',']).next()?;
    let port = addr.rsplit_once(':')?.1.parse().ok()?;
    let flags: Vec<&str> = f.get(2)?.split(',').collect();
    let primary = *f.get(3)?;
    let slots = f
        .get(8..)
        .unwrap_or_default()
        .iter()
        .filter(|s| !s.starts_with('[')) // "[slot->-id]": migration in progress
        .map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect::<Option<_>>()?;
    Some(ClusterNode {
        id: f[0].to_string(),
        port,
        master: flags.contains(&"master"),
        failed: flags.contains(&"fail"),
        primary_id: (primary != "-").then(|| primary.to_string()),
        slots,
    })
}

/// Slot -> owner's port in one node's view; None where unassigned.
fn slot_owners(view: &[ClusterNode]) -> Vec<Option<u16>> {
    let mut owners = vec![None; CLUSTER_SLOTS];
    for n in view.iter().filter(|n| n.master) {
        for &(a, b) in &n.slots {
            for o in &mut owners[a..=b.min(CLUSTER_SLOTS - 1)] {
                *o = Some(n.port);
            }
        }
    }
    owners
}

impl Cluster {
    /// Start six nodes, join them, and wait until every node says
    /// `cluster_state:ok` with all slots ok, all nodes agree on who owns
    /// which slot, and every replica is in sync. Takes a few seconds.
    pub fn start() -> Cluster {
        let cli = redis_cli_bin();
        match Command::new(&cli).arg("--version").output() {
            Err(e) if e.kind() == ErrorKind::NotFound => panic!(
                "{cli} not found on PATH; install it (apt-get install redis-tools) or set REDLOCK_TEST_REDIS_CLI"
            ),
            Err(e) => panic!("run {cli}: {e}"),
            Ok(_) => {}
        }
        let timeout = CLUSTER_NODE_TIMEOUT.as_millis().to_string();
        let nodes = start_many(6, || {
            RedisServer::builder()
                .config(DATA_NODE_CONFIG)
                .port_from(free_cluster_port)
                .arg("--cluster-enabled")
                .arg("yes")
                .arg("--cluster-config-file")
                .arg("nodes.conf")
                .arg("--cluster-node-timeout")
                .arg(&timeout)
                .start()
        });
        let cluster = Cluster {
            seeds: nodes[..3].iter().map(RedisServer::port).collect(),
            nodes,
        };
        let mut create = Command::new(&cli);
        create.arg("--cluster").arg("create");
        create.args(cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")));
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = run_with_timeout(&mut create, TOPOLOGY_TIMEOUT);
        assert!(
            out.code == Some(0),
            "{create:?} failed ({:?}):\n{}\n{}\n{}",
            out.code,
            out.stdout,
            out.stderr,
            cluster.logs()
        );
        wait_for(
            "cluster ok with three primaries, each with a replica",
            TOPOLOGY_TIMEOUT,
            || cluster.logs(),
            || {
                let roles = cluster.settled()?;
                let replicas: Vec<u16> = roles.iter().filter_map(|r| r.1).collect();
                let mut distinct = replicas.clone();
                distinct.sort();
                distinct.dedup();
                (roles.len() == 6 && replicas.len() == 3 && distinct.len() == 3).then_some(())
            },
        );
        cluster
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`: the three
    /// initial primaries as seed nodes.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .seeds
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Ports of all six nodes, killed or not, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The node on `port` (to pause, kill, restart or connect to it).
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// A plain (non-cluster) connection with 5 s timeouts to the node on `port`.
    pub fn conn(&self, port: u16) -> redis::Connection {
        self.nodes
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
            .conn()
    }

    /// The hash slot of `key`, by `CLUSTER KEYSLOT` (hash tags included).
    pub fn slot_of(&self, key: &str) -> u16 {
        query(
            self.any_running(),
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
        )
    }

    /// The primary that owns `slot`, as the first running node sees it (call
    /// after `wait_ok` for an answer every node agrees with).
    pub fn primary_for_slot(&self, slot: u16) -> u16 {
        slot_owners(&self.view())[usize::from(slot)]
            .unwrap_or_else(|| panic!("slot {slot} is not assigned\n{}", self.logs()))
    }

    /// Ports of the running primaries.
    pub fn primaries(&self) -> Vec<u16> {
        self.view()
            .iter()
            .filter(|n| n.master && !n.failed && self.running(n.port))
            .map(|n| n.port)
            .collect()
    }

    /// The running replica of `primary`.
    pub fn replica_of(&self, primary: u16) -> u16 {
        let view = self.view();
        let id = Self::id_in(&view, primary);
        view.iter()
            .find(|n| n.primary_id.as_deref() == Some(id) && self.running(n.port))
            .unwrap_or_else(|| panic!("{primary} has no running replica\n{}", self.logs()))
            .port
    }

    /// A primary that does NOT own `slot`: it answers MOVED for keys there.
    pub fn port_not_owning(&self, slot: u16) -> u16 {
        let owner = self.primary_for_slot(slot);
        self.primaries()
            .into_iter()
            .find(|&p| p != owner)
            .expect("another primary")
    }

    /// `redis+cluster://127.0.0.1:P` for a single seed that does not own
    /// `slot`, for tests that must start at the wrong node.
    pub fn seed_not_owning(&self, slot: u16) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.port_not_owning(slot))
    }

    /// Move `slot` and its keys to `to_primary` the way `redis-cli --cluster
    /// reshard` does: IMPORTING on the target, MIGRATING on the source,
    /// MIGRATE the keys in batches, then SETSLOT NODE on target, source and
    /// the other primaries. Returns once every running node agrees.
    pub fn migrate_slot(&mut self, slot: u16, to_primary: u16) {
        self.migrate_slot_by(slot, to_primary, 100);
    }

    /// `migrate_slot` with `batch` keys per MIGRATE: with many keys in the
    /// slot and a small batch, the slot stays half-moved (keys on both
    /// nodes: TRYAGAIN and ASK for multi-key commands) for a while.
    pub fn migrate_slot_by(&mut self, slot: u16, to_primary: u16, batch: usize) {
        let from = self.primary_for_slot(slot);
        assert_ne!(from, to_primary, "slot {slot} is already on {to_primary}");
        let view = self.view();
        let (from_id, to_id) = (Self::id_in(&view, from), Self::id_in(&view, to_primary));
        let setslot = |port: u16, state: &str, id: &str| {
            query::<()>(
                port,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            )
        };
        setslot(to_primary, "IMPORTING", from_id);
        setslot(from, "MIGRATING", to_id);
        loop {
            let keys: Vec<Vec<u8>> = query(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(batch),
            );
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(to_primary)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(keys);
            query::<()>(from, &migrate);
        }
        setslot(to_primary, "NODE", to_id);
        setslot(from, "NODE", to_id);
        for p in self.primaries() {
            if p != from && p != to_primary {
                setslot(p, "NODE", to_id);
            }
        }
        wait_for(
            &format!("every node sees slot {slot} on {to_primary}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || {
                self.running_ports()
                    .all(|p| {
                        cluster_nodes(p)
                            .is_some_and(|v| slot_owners(&v)[usize::from(slot)] == Some(to_primary))
                    })
                    .then_some(())
            },
        );
        self.wait_ok();
    }

    /// `CLUSTER FAILOVER` on the replica of `primary`; waits until that
    /// replica is primary of the old one's slots everywhere, the old primary
    /// (if running) replicates from it, and the cluster is ok. Returns the new
    /// primary.
    pub fn failover_replica_of(&mut self, primary: u16) -> u16 {
        let replica = self.replica_of(primary);
        let slot = self
            .view()
            .into_iter()
            .find(|n| n.port == primary)
            .and_then(|n| n.slots.first().and_then(|s| u16::try_from(s.0).ok()));
        let slot = slot.unwrap_or_else(|| panic!("{primary} owns no slot"));
        wait_for(
            &format!("{replica} in sync with {primary}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || replicates_from(replica, primary).then_some(()),
        );
        query::<()>(replica, redis::cmd("CLUSTER").arg("FAILOVER"));
        self.wait_promoted(slot, replica);
        replica
    }

    /// SIGKILL the primary of `slot` and wait until the cluster has promoted
    /// its replica and is ok again. Returns (killed, promoted).
    pub fn kill_primary_for_slot(&mut self, slot: u16) -> (u16, u16) {
        let old = self.primary_for_slot(slot);
        let replica = self.replica_of(old);
        wait_for(
            &format!("{replica} in sync with {old}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || replicates_from(replica, old).then_some(()),
        );
        self.node(old).kill();
        self.wait_promoted(slot, replica);
        (old, replica)
    }

    /// Wait until every running node says `cluster_state:ok` with all 16384
    /// slots ok, all of them agree on the owner of every slot and on who
    /// replicates whom, every owner is running and says `role:master`, and
    /// every running replica is in sync with its primary.
    pub fn wait_ok(&self) {
        wait_for(
            "cluster ok on every running node",
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || self.settled().map(drop),
        );
    }

    /// Log tails of every node, for failure messages.
    pub fn logs(&self) -> String {
        log_tails(self.nodes.iter().map(|s| ("cluster node", s)))
    }

    /// The settled layout if the cluster is ok (see `wait_ok`): every running
    /// node as (port, port of its primary if it is a replica).
    fn settled(&self) -> Option<Roles> {
        let mut agreed: Option<(Vec<Option<u16>>, Roles)> = None;
        for port in self.running_ports() {
            let i = cluster_info(port)?;
            let all = CLUSTER_SLOTS.to_string();
            if i.get("cluster_state").map(String::as_str) != Some("ok")
                || i.get("cluster_slots_ok") != Some(&all)
            {
                return None;
            }
            let view = cluster_nodes(port)?;
            let port_of = |id: &String| view.iter().find(|n| &n.id == id).map(|n| n.port);
            let mut roles: Roles = view
                .iter()
                .filter(|n| self.running(n.port) && !n.failed)
                .map(|n| (n.port, n.primary_id.as_ref().and_then(port_of)))
                .collect();
            roles.sort();
            // This node, if a replica in its own view, must be in sync.
            if let Some(&(_, primary)) = roles.iter().find(|r| r.0 == port) {
                if primary.is_some_and(|p| !replicates_from(port, p)) {
                    return None;
                }
            }
            let shape = (slot_owners(&view), roles);
            if agreed.get_or_insert_with(|| shape.clone()) != &shape {
                return None;
            }
        }
        let (owners, roles) = agreed?;
        let mut primaries: Vec<u16> = owners.into_iter().flatten().collect();
        primaries.sort();
        primaries.dedup();
        primaries
            .into_iter()
            .all(|p| self.running(p) && is_master(p))
            .then_some(roles)
    }

    /// Wait until `replica` owns `slot` on every running node, then `wait_ok`.
    fn wait_promoted(&self, slot: u16, replica: u16) {
        wait_for(
            &format!("{replica} promoted to primary of slot {slot}"),
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || {
                let everywhere = self.running_ports().all(|p| {
                    cluster_nodes(p)
                        .is_some_and(|v| slot_owners(&v)[usize::from(slot)] == Some(replica))
                });
                (everywhere && is_master(replica)).then_some(())
            },
        );
        self.wait_ok();
    }

    /// `CLUSTER NODES` as seen by the first running node that answers.
    fn view(&self) -> Vec<ClusterNode> {
        wait_for(
            "a running cluster node answers CLUSTER NODES",
            TOPOLOGY_TIMEOUT,
            || self.logs(),
            || self.running_ports().find_map(cluster_nodes),
        )
    }

    fn id_in(view: &[ClusterNode], port: u16) -> &str {
        &view
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node {port} in CLUSTER NODES"))
            .id
    }

    fn running(&self, port: u16) -> bool {
        self.nodes
            .iter()
            .any(|s| s.port() == port && s.is_running())
    }

    fn running_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes
            .iter()
            .filter(|s| s.is_running())
            .map(RedisServer::port)
    }

    fn any_running(&self) -> u16 {
        self.running_ports()
            .next()
            .expect("no cluster node running")
    }
}
