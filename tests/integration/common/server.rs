//! Throwaway redis-server processes on loopback (modelled on redis-rs's test harness).
use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::run::process_alive;

const READY_TIMEOUT: Duration = Duration::from_secs(10);
const CONN_TIMEOUT: Duration = Duration::from_secs(5);
const SPAWN_ATTEMPTS: usize = 5;

/// Ports already handed out in this process: the OS may return the same free port
/// twice if the first server has not bound it yet.
static USED_PORTS: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(Default::default);

/// A free loopback port, never 6379, never one already handed out here.
pub fn free_port() -> u16 {
    super::note_test();
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .expect("bind 127.0.0.1:0")
            .port();
        let mut used = USED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        // Never 6379: a developer's real redis may live there.
        if port != 6379 && used.insert(port) {
            return port;
        }
    }
}

/// The redis-server binary: `$REDLOCK_TEST_REDIS_SERVER`, else `redis-server` on PATH.
/// Sentinels are the same binary run with `--sentinel`.
pub fn redis_server_bin() -> String {
    std::env::var("REDLOCK_TEST_REDIS_SERVER").unwrap_or("redis-server".into())
}

/// The redis-cli binary: `$REDLOCK_TEST_REDIS_CLI`, else `redis-cli` on PATH.
pub fn redis_cli_bin() -> String {
    std::env::var("REDLOCK_TEST_REDIS_CLI").unwrap_or("redis-cli".into())
}

/// Whether the redis-server under test was built with TLS: a TLS build
/// fails on the missing certificate file, one without on `--tls-port`
/// itself (Redis 6.2: a bad directive; Valkey: "Failed finding TLS
/// support"). Asked once per test run.
pub fn server_has_tls() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let out = Command::new(redis_server_bin())
            .args([
                "--port",
                "0",
                "--tls-port",
                "1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args([
                "--tls-cert-file",
                "/nonexistent/c",
                "--tls-key-file",
                "/nonexistent/k",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", redis_server_bin()));
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        ![
            "Bad directive",
            "Failed finding TLS support",
            "connection type tls",
        ]
        .iter()
        .any(|no| text.contains(no))
    })
}

/// Redis Cluster's bus port is always the data port + 10000.
pub const CLUSTER_BUS_OFFSET: u16 = 10000;

/// A free port for a cluster node: one whose bus port (+10000) exists, is
/// free, and is reserved here too. (A node whose bus port is taken or above
/// 65535 exits at once; `start` would retry, but only 5 times.)
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_err() {
            continue;
        }
        let mut used = USED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        if bus != 6379 && used.insert(bus) {
            return port;
        }
    }
}

/// How `REDLOCK_TEST_WITHOUT_SCRIPTS` takes scripts away from every test
/// server (CI's script-free legs run a subset of the suite so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithoutScripts {
    /// `acl`: `ACL SETUSER default -@scripting` (the transaction protocol).
    Acl,
    /// `lua-unloaded`: Valkey 9.1's `MODULE UNLOAD lua`.
    LuaUnloaded,
}

pub fn without_scripts() -> Option<WithoutScripts> {
    match std::env::var("REDLOCK_TEST_WITHOUT_SCRIPTS").as_deref() {
        Ok("acl") => Some(WithoutScripts::Acl),
        Ok("lua-unloaded") => Some(WithoutScripts::LuaUnloaded),
        Ok("") | Err(_) => None,
        Ok(other) => panic!("REDLOCK_TEST_WITHOUT_SCRIPTS={other}: acl or lua-unloaded"),
    }
}

fn is_sentinel(args: &[String]) -> bool {
    args.iter().any(|a| a == "--sentinel")
}

#[derive(Default)]
pub struct RedisServerBuilder {
    requirepass: Option<String>,
    users: Vec<(String, String, String)>,
    extra: Vec<String>,
    config: Option<String>,
    pick_port: Option<fn() -> u16>,
    binary: Option<String>,
}

impl RedisServerBuilder {
    /// Run this server binary instead of `redis_server_bin()` (a test that
    /// needs one build whatever the suite runs against).
    pub fn binary(mut self, path: &str) -> Self {
        self.binary = Some(path.to_string());
        self
    }

    /// Password of the `default` user.
    pub fn requirepass(mut self, pass: &str) -> Self {
        self.requirepass = Some(pass.to_string());
        self
    }
    /// Extra ACL user; `rules` is split on whitespace, e.g. `"~* +@all"`.
    pub fn acl_user(mut self, name: &str, pass: &str, rules: &str) -> Self {
        self.users.push((name.into(), pass.into(), rules.into()));
        self
    }
    /// Extra raw redis-server argument.
    pub fn arg(mut self, arg: &str) -> Self {
        self.extra.push(arg.to_string());
        self
    }

    /// Write `text` to `redis.conf` in the server's temp dir and pass it as the
    /// config file (first argument), so that `CONFIG REWRITE`, and a sentinel's own
    /// rewrites, have a writable file. Command-line arguments still win over it.
    pub fn config(mut self, text: &str) -> Self {
        self.config = Some(text.to_string());
        self
    }

    /// Pick the port with `pick` (e.g. `free_cluster_port`) instead of `free_port`.
    pub fn port_from(mut self, pick: fn() -> u16) -> Self {
        self.pick_port = Some(pick);
        self
    }

    /// Run as a sentinel (`--sentinel`); needs `config` with a `sentinel monitor` line.
    pub fn sentinel(self) -> Self {
        self.arg("--sentinel")
    }

    pub fn start(self) -> RedisServer {
        super::note_test();
        let dir = tempfile::Builder::new()
            .prefix("redlock-test")
            .tempdir()
            .expect("create temp dir");
        let d = dir.path().display().to_string();
        if let Some(text) = &self.config {
            std::fs::write(dir.path().join(CONFIG_FILE), text).expect("write redis.conf");
        }
        let mut args: Vec<String> = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let log = format!("{d}/redis.log");
        args.extend(["--dir".into(), d, "--logfile".into(), log]);
        args.extend(["--daemonize", "no", "--protected-mode", "no"].map(String::from));
        if let Some(p) = &self.requirepass {
            args.extend(["--requirepass".into(), p.clone()]);
        }
        for (name, pass, rules) in &self.users {
            args.extend([
                "--user".into(),
                name.clone(),
                "on".into(),
                format!(">{pass}"),
            ]);
            args.extend(rules.split_whitespace().map(String::from));
        }
        args.extend(self.extra);
        if without_scripts() == Some(WithoutScripts::LuaUnloaded) && !is_sentinel(&args) {
            args.extend(["--enable-module-command".into(), "yes".into()]);
        }
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            password: self.requirepass,
            args,
            config: self.config.is_some(),
            binary: self.binary,
        };
        // A port can be grabbed by someone else between our probe and redis's bind;
        // redis then exits immediately, so pick another port and try again.
        for _ in 0..SPAWN_ATTEMPTS {
            server.port = self.pick_port.unwrap_or(free_port)();
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(exited) => eprintln!("redis-server on port {} {exited}; retrying", server.port),
            }
        }
        panic!(
            "redis-server failed to start {SPAWN_ATTEMPTS} times; log:\n{}",
            server.log_tail()
        );
    }
}

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    password: Option<String>,
    args: Vec<String>, // everything except --port
    config: bool,      // dir/redis.conf goes first
    binary: Option<String>,
}

const CONFIG_FILE: &str = "redis.conf";

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// Start `n` plain servers concurrently.
    pub fn many(n: usize) -> Vec<RedisServer> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n).map(|_| s.spawn(RedisServer::start)).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Spawn on `self.port` and wait until ready. `Err` means the process exited early
    /// (typically: port taken); a hang past READY_TIMEOUT panics.
    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let bin = self.binary.clone().unwrap_or_else(redis_server_bin);
        let mut cmd = Command::new(&bin);
        if let Some(conf) = self.config_file() {
            cmd.arg(conf);
        }
        let child = cmd
            .args(["--port", &self.port.to_string()])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Err(e) if e.kind() == ErrorKind::NotFound => panic!(
                "{bin} not found on PATH; install it (apt-get install redis-server) or set REDLOCK_TEST_REDIS_SERVER"
            ),
            other => other.unwrap_or_else(|e| panic!("spawn {bin}: {e}")),
        };
        let pid = child.id();
        // Stored before waiting so that Drop reaps it if we panic below.
        self.child = Some(child);
        // Our own pid's "Ready" log line proves the PING reached *our* process and not
        // some other server that grabbed the port first.
        // (`M` for a master, `S` for a replica; a sentinel, `X`, logs no "Ready" line
        // but its ID once its config is saved and it listens.)
        let ready_lines = [format!("{pid}:M"), format!("{pid}:S")];
        let sentinel_line = format!("{pid}:X");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.child.as_mut().unwrap();
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return Err(format!("exited early ({status})"));
            }
            let logged = self.log().lines().any(|l| {
                (ready_lines.iter().any(|r| l.starts_with(r.as_str()))
                    && l.contains("Ready to accept connections"))
                    || (l.starts_with(&sentinel_line) && l.contains("Sentinel ID is"))
            });
            if logged
                && raw_ping(self.port)
                    .is_some_and(|r| r.starts_with("+PONG") || r.starts_with("-NOAUTH"))
            {
                self.deny_scripts();
                return Ok(());
            }
            if Instant::now() > deadline {
                panic!(
                    "redis-server on port {} not ready after {READY_TIMEOUT:?}; log tail:\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Pid of the running process; panics after `kill()`.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server not running").id() as i32
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// The config file given to redis-server, if the builder had `config`.
    pub fn config_file(&self) -> Option<PathBuf> {
        self.config.then(|| self.dir.path().join(CONFIG_FILE))
    }

    /// Have the server cache a plain run's scripts (acquire, release), as
    /// a server any run has used does: a run then sends each by its
    /// digest alone, one request and one reply (for tests that count the
    /// requests a proxy lets through).
    pub fn cache_scripts(&self) {
        let out = super::run::run_with_timeout(
            super::run::redlock(&self.url()).args(["-k", "scripts-cached", "--", "true"]),
            Duration::from_secs(30),
        );
        assert_eq!(out.code, Some(0), "a run to cache the scripts: {out:?}");
    }

    /// How many calls of `command` the server has served (INFO
    /// commandstats; 0 for one it never ran).
    pub fn calls_of(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .expect("INFO commandstats");
        let field = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&field)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// The scripts the server has run: a run sends each by its digest
    /// (EVALSHA), its text (EVAL) only where the server lacks it.
    pub fn script_calls(&self) -> u64 {
        self.calls_of("eval") + self.calls_of("evalsha")
    }

    /// URL without credentials.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// URL with credentials (`user` None = default user), percent-encoded.
    pub fn url_with(&self, user: Option<&str>, pass: &str) -> String {
        let (u, p) = (pct(user.unwrap_or("")), pct(pass));
        format!("redis://{u}:{p}@127.0.0.1:{}", self.port)
    }

    /// A connection with 5 s timeouts, authenticated as default user if requirepass is set.
    /// Under `REDLOCK_TEST_WITHOUT_SCRIPTS` (see [`without_scripts`]),
    /// take scripts away from this server as it starts (again after a
    /// restart): the default user denied `@scripting`, or the Lua module
    /// unloaded. Tests that read Redis with plain commands are unchanged.
    fn deny_scripts(&self) {
        if is_sentinel(&self.args) {
            return;
        }
        let words: &[&str] = match without_scripts() {
            None => return,
            Some(WithoutScripts::Acl) => &["ACL", "SETUSER", "default", "-@scripting"],
            Some(WithoutScripts::LuaUnloaded) => &["MODULE", "UNLOAD", "lua"],
        };
        let mut cmd = redis::cmd(words[0]);
        cmd.arg(&words[1..]);
        let done: redis::RedisResult<()> = cmd.query(&mut self.conn());
        done.unwrap_or_else(|e| panic!("{words:?} on port {}: {e}", self.port));
    }

    pub fn conn(&self) -> redis::Connection {
        let url = match &self.password {
            Some(p) => self.url_with(None, p),
            None => self.url(),
        };
        let conn = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(CONN_TIMEOUT))
            .unwrap_or_else(|e| panic!("connect to redis on port {}: {e}", self.port));
        conn.set_read_timeout(Some(CONN_TIMEOUT)).unwrap();
        conn.set_write_timeout(Some(CONN_TIMEOUT)).unwrap();
        conn
    }

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid()), sig).expect("signal redis-server");
    }

    /// Freeze the server (SIGSTOP): connects still succeed (kernel backlog), replies never come.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// SIGKILL and reap; no-op if already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill(); // SIGKILL works on stopped processes too
            let _ = child.wait();
        }
    }

    /// Start again on the same port and dir (killing the old process first).
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn_and_wait() {
            panic!(
                "redis-server restart on port {} {e}; log tail:\n{}",
                self.port,
                self.log_tail()
            );
        }
    }

    pub fn is_running(&self) -> bool {
        self.child
            .as_ref()
            .is_some_and(|c| process_alive(c.id() as i32))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// The last 20 lines of the server's log.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
        }
        self.kill();
        // `dir` (TempDir) is removed after this, once the process is gone.
    }
}

/// One raw RESP PING (no auth); returns the reply, e.g. "+PONG" or "-NOAUTH ...",
/// or None if nothing answered.
pub fn raw_ping(port: u16) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).trim_end().to_string())
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---- small Redis-side helpers (panic on protocol errors: tests want loud failures) ----

fn q<T: redis::FromRedisValue>(conn: &mut redis::Connection, c: &redis::Cmd) -> T {
    // A signal to the test process (a child's SIGCHLD) can interrupt the
    // read of a reply (EINTR, once seen in CI): ask again, twice at most.
    let mut tries = 0;
    loop {
        match c.query(conn) {
            Ok(value) => return value,
            Err(e) if tries < 2 && e.to_string().contains("Interrupted system call") => tries += 1,
            Err(e) => panic!("redis {c:?}: {e}"),
        }
    }
}

pub fn get(conn: &mut redis::Connection, key: &str) -> Option<String> {
    q(conn, redis::cmd("GET").arg(key))
}

/// Milliseconds to live; -1 no expiry, -2 missing key.
pub fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    q(conn, redis::cmd("PTTL").arg(key))
}

pub fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    q::<i64>(conn, redis::cmd("EXISTS").arg(key)) == 1
}

pub fn hgetall(conn: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    q(conn, redis::cmd("HGETALL").arg(key))
}

pub fn dbsize(conn: &mut redis::Connection) -> i64 {
    q(conn, &redis::cmd("DBSIZE"))
}

/// How many live and dead members stand in `key`'s line of waiters.
pub fn queued(server: &RedisServer, key: &str) -> i64 {
    q(
        &mut server.conn(),
        redis::cmd("ZCARD").arg(format!("redlock:{{{key}}}:waiters")),
    )
}

/// `CONFIG SET name value`.
pub fn config_set(conn: &mut redis::Connection, name: &str, value: &str) {
    q::<()>(conn, redis::cmd("CONFIG").arg("SET").arg(name).arg(value))
}

/// How many clients are subscribed to exactly `channels` channels. A
/// waiter listens on two (the lock's and its own wake-up channel); the
/// holder listens on one (its lock's, for a force-release).
pub fn clients_subscribed_to(conn: &mut redis::Connection, channels: usize) -> usize {
    let list: String = q(conn, redis::cmd("CLIENT").arg("LIST"));
    let wanted = format!(" sub={channels} ");
    list.lines().filter(|l| l.contains(&wanted)).count()
}
