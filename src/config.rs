//! Flags plus environment, turned into a validated configuration.
//!
//! Everything that can be wrong with the user's input is found here, before
//! anything is sent to Redis, and reported as a clap usage error (exit 2)
//! that names the option and the value, with any password redacted.

use std::ffi::OsString;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, ValueEnum};

use crate::cli::{AdminCmd, Cli, ConnArgs, OnUnavailable, RunArgs, Wait};
use crate::lock::timing::{self, Timing};
use crate::lock::{
    distinct, endpoint, prefix_fits_cluster, with_password, with_tls, Endpoint, Replicas, TlsFiles,
};
use crate::log::{Format, Log, Verbosity};
use crate::metrics::Metrics;
use crate::queue::Queue;
use crate::secrets::{redact, remember};
use crate::warn::Warning;

/// Used when neither `--redis` nor the environment names a server.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Where the lock lives: shared by the run mode and the admin subcommands.
#[derive(Debug, Clone)]
pub struct Conn {
    pub endpoints: Vec<Endpoint>,
    pub prefix: String,
    pub verbosity: Verbosity,
    pub log_format: Format,
}

impl Conn {
    /// Where this run's events go.
    pub fn log(&self) -> Log {
        Log::new(self.verbosity, self.log_format)
    }
}

/// What the run mode needs, every value checked.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The run's name in messages, events and metrics: its key, or its
    /// keys joined by " + ".
    pub key: String,
    /// The keys to hold (`-k A -k B`), sorted and without repeats: the
    /// one order in which every run takes them (see `keyset.rs`).
    pub keys: Vec<String>,
    /// TTL, refresh period and grace, checked against each other.
    pub timing: Timing,
    /// `None` waits forever.
    pub wait: Option<Duration>,
    pub conflict_exit_code: u8,
    /// Program and arguments (`sh -c LINE` for `-c`).
    pub argv: Vec<OsString>,
    /// COMMAND as shown in the holder record and messages.
    pub display: String,
    /// Keep the lock at least this long after acquiring it.
    pub min_hold: Option<Duration>,
    /// Stop COMMAND after this long.
    pub max_hold: Option<Duration>,
    /// Holders that may share the key (1: a plain lock).
    pub limit: u32,
    /// `--shared`: a shared holder (never with `--limit N > 1`).
    pub shared: bool,
    /// Sleep up to this long before the first attempt.
    pub random_delay: Option<Duration>,
    pub on_unavailable: OnUnavailable,
    /// Replicas that must confirm each write.
    pub replicas: Replicas,
    /// `--metrics-textfile`: where the run's metrics go.
    pub metrics: Option<Metrics>,
    /// `--allow-eviction`: use a server that may evict the lock's key.
    pub allow_eviction: bool,
    /// `--queue`: how this run stands in line.
    pub queue: Queue,
    /// `--queue-max`: at most this many waiters in line (`None`: unbounded).
    pub queue_max: Option<u32>,
    /// `--replace-running`: revoke the holder, then run (see `replace.rs`).
    pub replace_running: bool,
    /// `--warn-signal` with `--warn-before`.
    pub warning: Option<Warning>,
    /// `--on-lost LINE`.
    pub on_lost: Option<String>,
    /// `--lease-file`: give COMMAND `REDLOCK_LEASE_FILE`.
    pub lease_file: bool,
    pub contain: crate::cli::Contain,
    /// `--progress`: while waiting, say so this often (zero: once).
    pub progress: Duration,
    /// `--label`, `$REDLOCK_LABEL` or the CI job's URL: shown with this
    /// run as holder or waiter (empty: none).
    pub label: String,
}

/// What an admin subcommand (`status`, `list`, `wait`, `force-release`)
/// needs: where the locks live, and what to do.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub conn: Conn,
    pub task: Task,
}

/// One admin subcommand, with its values.
#[derive(Debug, Clone)]
pub enum Task {
    Status {
        keys: Vec<String>,
        json: bool,
    },
    List {
        json: bool,
    },
    Wait {
        key: String,
        /// `None` waits forever.
        timeout: Option<Duration>,
        /// The exit code when KEY is still held at the timeout.
        busy_exit: u8,
    },
    ForceRelease {
        key: String,
        /// Only if the lock holds this token.
        token: Option<String>,
        /// Delete at once rather than revoke.
        now: bool,
    },
    /// `hold KEY --for D --reason R` (see `admin::hold`).
    Hold(crate::cli::HoldArgs),
    /// `release KEY [--token T]`.
    Release {
        key: String,
        token: Option<String>,
    },
}

impl AdminConfig {
    /// Where its events go: every event names the key it is about, when
    /// there is one.
    pub fn log(&self) -> Log {
        let log = self.conn.log();
        match &self.task {
            Task::Wait { key, .. } | Task::ForceRelease { key, .. } => log.for_key(key),
            Task::Release { key, .. } => log.for_key(key),
            Task::Hold(args) => log.for_key(&args.key),
            Task::Status { keys, .. } if keys.len() == 1 => log.for_key(&keys[0]),
            _ => log,
        }
    }
}

/// An admin subcommand's options (clap has checked each one already).
pub fn admin(cmd: AdminCmd, conn: Conn) -> AdminConfig {
    let task = match cmd {
        AdminCmd::Status { keys, json } => Task::Status { keys, json },
        AdminCmd::List { json } => Task::List { json },
        AdminCmd::Wait(args) => Task::Wait {
            key: args.key,
            timeout: wait_duration(args.timeout),
            busy_exit: args.conflict_exit_code,
        },
        AdminCmd::ForceRelease { key, token, now } => Task::ForceRelease { key, token, now },
        AdminCmd::Hold(args) => Task::Hold(args),
        AdminCmd::Release { key, token } => Task::Release { key, token },
    };
    AdminConfig { conn, task }
}

/// The Redis servers and naming options, from flags or environment.
pub fn conn(args: &ConnArgs) -> Result<Conn, clap::Error> {
    let (urls, source) = urls(&args.redis)?;
    for url in &urls {
        remember(url);
    }
    let endpoints = urls
        .iter()
        .map(|url| {
            endpoint(url).map_err(|why| {
                usage(format!(
                    "invalid value '{}' for '{source}': {why}",
                    redact(url)
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    distinct(&endpoints).map_err(|why| usage(format!("invalid value for '{source}': {why}")))?;
    let files = TlsFiles {
        ca: args.tls_ca.as_deref(),
        cert: args.tls_cert.as_deref(),
        key: args.tls_key.as_deref(),
    };
    let endpoints = with_tls(endpoints, files).map_err(usage)?;
    let endpoints = password_file(endpoints, args.password_file.as_deref())?;
    if endpoints.iter().any(Endpoint::is_cluster) && !prefix_fits_cluster(&args.prefix) {
        return Err(usage(format!(
            "invalid value {:?} for '--prefix <PREFIX>': its first '{{' is followed by '}}', an \
             empty hash tag, so a lock's keys could not share one Redis Cluster slot",
            args.prefix
        )));
    }
    if args.prefix.chars().any(char::is_control) {
        return Err(usage(format!(
            "invalid value {:?} for '--prefix <PREFIX>': must not contain control characters",
            args.prefix
        )));
    }
    let verbosity = match (args.quiet, args.verbose) {
        (true, _) => Verbosity::Quiet,
        (_, true) => Verbosity::Verbose,
        _ => Verbosity::Normal,
    };
    Ok(Conn {
        endpoints,
        prefix: args.prefix.clone(),
        verbosity,
        log_format: from_env(args.log_format, "REDLOCK_LOG_FORMAT")?.unwrap_or(Format::Text),
    })
}

/// `--password-file FILE`, else `$REDLOCK_PASSWORD_FILE`: the password of
/// every URL without one. A path, not the secret, is what nested runs
/// inherit, so they read the same file.
fn password_file(
    endpoints: Vec<Endpoint>,
    given: Option<&std::path::Path>,
) -> Result<Vec<Endpoint>, clap::Error> {
    let (file, source) = match given {
        Some(file) => (file.to_path_buf(), "--password-file <FILE>"),
        None => match env_os("REDLOCK_PASSWORD_FILE") {
            Some(file) => (file.into(), "$REDLOCK_PASSWORD_FILE"),
            None => return Ok(endpoints),
        },
    };
    with_password(endpoints, &file).map_err(|why| {
        usage(format!(
            "invalid value '{}' for '{source}': {why}",
            file.display()
        ))
    })
}

/// The URLs to use and where they came from (for errors): `--redis`, else
/// `$REDLOCK_REDIS_URL`, else `$REDIS_URL`, else the default. A variable
/// that is set but not UTF-8 is an error, never skipped: skipping it
/// would lock another server than the hosts that read it.
fn urls(given: &[OsString]) -> Result<(Vec<String>, String), clap::Error> {
    if !given.is_empty() {
        let source = "--redis <URL>";
        let urls = given
            .iter()
            .map(|url| text(url.clone(), source))
            .collect::<Result<_, _>>()?;
        return Ok((urls, source.to_string()));
    }
    for var in ["REDLOCK_REDIS_URL", "REDIS_URL"] {
        if let Some(value) = env_text(var)? {
            return Ok((split_urls(&value), format!("${var}")));
        }
    }
    Ok((vec![DEFAULT_URL.to_string()], "the default URL".to_string()))
}

/// Bytes that must be text (a URL), or an error naming `source` that
/// shows the value with any password redacted.
fn text(value: OsString, source: &str) -> Result<String, clap::Error> {
    value.into_string().map_err(|value| {
        usage(format!(
            "invalid value '{}' for '{source}': not valid UTF-8 (check the locale or the file it \
             came from)",
            redact(&value.to_string_lossy())
        ))
    })
}

/// A variable of the environment that stands in for an option: unset,
/// empty or blank is `None` (as `VAR=` in a unit file means "no value").
fn env_os(var: &str) -> Option<OsString> {
    std::env::var_os(var).filter(|v| !v.to_string_lossy().trim().is_empty())
}

/// [`env_os`] as text.
fn env_text(var: &str) -> Result<Option<String>, clap::Error> {
    env_os(var).map(|v| text(v, &format!("${var}"))).transpose()
}

/// An option's value: given on the command line, else from `var`; errors
/// name the variable, not a flag the user never typed.
fn from_env<T: ValueEnum>(given: Option<T>, var: &str) -> Result<Option<T>, clap::Error> {
    if given.is_some() {
        return Ok(given);
    }
    let Some(value) = env_text(var)? else {
        return Ok(None);
    };
    T::from_str(value.trim(), false).map(Some).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value())
            .map(|v| v.get_name().to_string())
            .collect();
        usage(format!(
            "invalid value {:?} for '${var}': expected one of {}",
            crate::secrets::untrusted(&value),
            names.join(", ")
        ))
    })
}

/// The URLs of `$REDLOCK_REDIS_URL`: split at each comma that begins a
/// new URL (`,SCHEME://`); any other comma belongs to the host list of a
/// Sentinel or Cluster URL (`redis+sentinel://h1,h2/mymaster`).
fn split_urls(value: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in value.split(',') {
        let starts_url = piece
            .trim_start()
            .split_once("://")
            .is_some_and(|(scheme, _)| {
                !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            });
        match urls.last_mut() {
            Some(last) if !starts_url => {
                last.push(',');
                last.push_str(piece.trim_end());
            }
            _ => urls.push(piece.trim().to_string()),
        }
    }
    urls
}

/// The options a [`Timing`] is made of, as its errors name them.
pub const TIMING_OPTIONS: timing::Names = timing::Names {
    ttl: timing::Name {
        full: "--ttl <DURATION>",
        short: "--ttl",
    },
    refresh: timing::Name {
        full: "--refresh <DURATION>",
        short: "--refresh",
    },
    kill_after: timing::Name {
        full: "--kill-after <DURATION>",
        short: "--kill-after",
    },
};

/// The run mode's options, checked against each other and the servers.
pub fn run(args: RunArgs, conn: &Conn) -> Result<RunConfig, clap::Error> {
    let keys = keys(args.key)?;
    let key = keys.join(" + ");
    let timing = timing(args.ttl, args.refresh, args.kill_after)?;
    for (option, value) in [
        ("--min-hold <DURATION>", args.min_hold),
        ("--max-hold <DURATION>", args.max_hold),
        ("--random-delay <DURATION>", args.random_delay),
        ("--wait <DURATION>", wait_duration(args.wait)),
        ("--warn-before <DURATION>", args.warn_before),
        ("--period <PERIOD>", args.period),
    ] {
        if let Some(value) = value {
            timing::check(option, value).map_err(invalid)?;
        }
    }
    let metrics = metrics_of(args.metrics_textfile, &key)?;
    let min_hold = period(args.period, args.random_delay)?.or(args.min_hold);
    let wait = match (args.no_wait || args.period.is_some(), args.wait) {
        (true, _) => Some(Duration::ZERO),
        (false, Wait::For(d)) => Some(d),
        (false, Wait::Forever) => None,
    };
    let (argv, display) = command(args.command_line, args.args)?;
    let replicas = replicas(args.replicas, conn)?;
    let given = from_env(args.queue, "REDLOCK_QUEUE")?;
    let queue = queue(given.unwrap_or_default(), args.limit, conn)?;
    let queue = replacing(args.replace_running, args.limit, (given, queue), conn)?;
    let shared = shared(args.shared, args.limit, args.replace_running)?;
    let queue_max = queue_max(args.queue_max, args.limit, conn)?;
    several_keys(&keys, args.limit, queue, args.replace_running || shared)?;
    Ok(RunConfig {
        key,
        keys,
        timing,
        wait,
        conflict_exit_code: args.conflict_exit_code,
        argv,
        display,
        min_hold: min_hold.filter(|d| !d.is_zero()),
        max_hold: args.max_hold,
        limit: args.limit,
        shared,
        random_delay: args.random_delay.filter(|d| !d.is_zero()),
        on_unavailable: args.on_unavailable,
        replicas,
        metrics,
        allow_eviction: args.allow_eviction,
        queue,
        queue_max,
        replace_running: args.replace_running,
        warning: args
            .warn_signal
            .zip(args.warn_before)
            .map(|(signal, before)| Warning { signal, before }),
        on_lost: args.on_lost,
        lease_file: args.lease_file,
        contain: from_env(args.contain, "REDLOCK_CONTAIN")?.unwrap_or(crate::cli::Contain::Auto),
        progress: args.progress,
        label: label(args.label)?,
    })
}

/// `--key`, given once or more: sorted and de-duplicated, the order in
/// which every run takes them.
fn keys(mut given: Vec<String>) -> Result<Vec<String>, clap::Error> {
    if given.is_empty() {
        return Err(usage(
            "the required option --key <KEY> was not given: name the lock with --key KEY".into(),
        ));
    }
    given.sort();
    given.dedup();
    Ok(given)
}

/// What several keys do not go with, refused by name (exit 2): a
/// semaphore, and a line that lets a newer waiter go first (a run that
/// holds its first keys while it waits for the next could be overtaken
/// there without end, and keep the first ones all that time).
fn several_keys(
    keys: &[String],
    limit: u32,
    queue: Queue,
    replace_running: bool,
) -> Result<(), clap::Error> {
    if keys.len() < 2 {
        return Ok(());
    }
    let with = match (limit > 1, queue) {
        _ if replace_running => "--replace-running or --shared".to_string(),
        (true, _) => format!("--limit {limit}"),
        (false, Queue::OldestFirst) => return Ok(()),
        (false, queue) => format!("--queue {}", queue.name()),
    };
    Err(usage(format!(
        "{with} cannot be used with several --key ({}): several keys are plain locks, \
         whose waiters are served oldest first",
        keys.join(", ")
    )))
}

/// The longest label kept; a longer one is cut (like COMMAND in the
/// holder record).
const LABEL_MAX: usize = 500;

/// `--label`, else `$REDLOCK_LABEL`, else the URL of the CI job we run
/// in, else none. `--label ''` sets none, whatever the CI. A label with
/// control characters is a quoting mistake: exit 2 naming the option or
/// the variable (a CI's variable holding one is ignored).
pub fn label(given: Option<String>) -> Result<String, clap::Error> {
    let (label, source) = match given {
        Some(label) => (label, "--label <TEXT>"),
        None => match env_text("REDLOCK_LABEL")? {
            Some(label) => (label, "$REDLOCK_LABEL"),
            None => return Ok(ci_job_url().map(|url| cut(&url)).unwrap_or_default()),
        },
    };
    if let Some(c) = label.chars().find(|c| c.is_control()) {
        return Err(usage(format!(
            "invalid value {:?} for '{source}': a label must not contain control characters \
             (found {c:?})",
            crate::secrets::untrusted(&label)
        )));
    }
    Ok(cut(label.trim()))
}

/// The URL of the CI job this run is part of, as the CI system sets it:
/// GitHub Actions (the workflow run), GitLab CI (the job), Jenkins (the
/// build).
fn ci_job_url() -> Option<String> {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty() && !v.chars().any(char::is_control))
    };
    let github = || {
        let server = var("GITHUB_SERVER_URL")?;
        let (repository, run) = (var("GITHUB_REPOSITORY")?, var("GITHUB_RUN_ID")?);
        Some(format!(
            "{}/{repository}/actions/runs/{run}",
            server.trim_end_matches('/')
        ))
    };
    github()
        .or_else(|| var("CI_JOB_URL"))
        .or_else(|| var("BUILD_URL"))
}

/// `text` cut to [`LABEL_MAX`] bytes at a character boundary.
fn cut(text: &str) -> String {
    if text.len() <= LABEL_MAX {
        return text.to_string();
    }
    let end = (0..=LABEL_MAX)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &text[..end])
}

/// The TTL with the refresh period and grace the user gave (or not),
/// checked. An error names an option the user typed, with the value that
/// works: a refresh or grace derived from the TTL (a third of it), or one
/// that no value could fix, is the TTL's fault, so `--ttl 100ms` is told
/// the shortest TTL that works, not blamed on a `--refresh` nobody gave.
fn timing(
    ttl: Duration,
    refresh: Option<Duration>,
    kill_after: Option<Duration>,
) -> Result<Timing, clap::Error> {
    let works =
        |ttl, refresh, kill_after| Timing::new(ttl, refresh, kill_after, &TIMING_OPTIONS).is_ok();
    let e = match Timing::new(ttl, refresh, kill_after, &TIMING_OPTIONS) {
        Ok(timing) => return Ok(timing),
        Err(e) => e,
    };
    let show = crate::log::show;
    let (given, most) = match e.option {
        o if o == TIMING_OPTIONS.refresh.full => (
            refresh,
            longest(timing::MIN_REFRESH, ttl, |r| {
                works(ttl, Some(r), kill_after)
            }),
        ),
        o if o == TIMING_OPTIONS.kill_after.full => (
            kill_after,
            longest(Duration::ZERO, ttl, |k| works(ttl, refresh, Some(k))),
        ),
        // The TTL itself (zero, too long), or another option.
        _ => return Err(invalid(e)),
    };
    if let (Some(_), Some(most)) = (given, most) {
        return Err(usage(format!(
            "invalid value '{}' for '{}': {}; at most {} with --ttl {}",
            show(e.value),
            e.option,
            e.why,
            show(most),
            show(ttl)
        )));
    }
    let Some(least) = shortest_ttl(|t| works(t, refresh, kill_after)) else {
        return Err(invalid(e));
    };
    let with = match (refresh, kill_after) {
        (None, None) => String::new(),
        (Some(r), None) => format!(" with --refresh {}", show(r)),
        (None, Some(k)) => format!(" with --kill-after {}", show(k)),
        (Some(r), Some(k)) => format!(" with --refresh {} and --kill-after {}", show(r), show(k)),
    };
    Err(usage(format!(
        "invalid value '{}' for '--ttl <DURATION>': too short to refresh the lock and stop \
         COMMAND before it could expire; the shortest TTL that works{with} is {}",
        show(ttl),
        show(least)
    )))
}

/// The shortest TTL, to the millisecond, for which `works` holds (it holds
/// for every longer one), if one up to the longest allowed does.
fn shortest_ttl(works: impl Fn(Duration) -> bool) -> Option<Duration> {
    let ms = Duration::from_millis;
    let (mut bad, mut good) = (0u64, u64::try_from(timing::MAX.as_millis()).ok()?);
    if !works(ms(good)) {
        return None;
    }
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        match works(ms(mid)) {
            true => good = mid,
            false => bad = mid,
        }
    }
    Some(ms(good))
}

/// The longest duration from `least` to below `limit`, to the millisecond,
/// for which `works` holds (it holds for every shorter one down to
/// `least`), if `least` itself works.
fn longest(least: Duration, limit: Duration, works: impl Fn(Duration) -> bool) -> Option<Duration> {
    let ms = Duration::from_millis;
    let mut good = u64::try_from(least.as_millis()).ok()?;
    let mut bad = u64::try_from(limit.as_millis()).ok()?;
    if bad <= good || !works(ms(good)) {
        return None;
    }
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        match works(ms(mid)) {
            true => good = mid,
            false => bad = mid,
        }
    }
    Some(ms(good))
}

/// `--period P`: the `--min-hold` that makes a job run once per period of
/// its schedule. Holding the lock P/2 after acquiring it turns away the
/// hosts that start up to P/2 later and frees it P/2 before the next run:
/// the widest spread of start times either way, with nothing for the user
/// to compute. `--random-delay` widens that spread, so it must stay below
/// P/2.
fn period(
    period: Option<Duration>,
    random_delay: Option<Duration>,
) -> Result<Option<Duration>, clap::Error> {
    let Some(period) = period else {
        return Ok(None);
    };
    let hold = period / 2;
    if let Some(delay) = random_delay.filter(|d| *d >= hold) {
        return Err(usage(format!(
            "invalid value '{}' for '--random-delay <DURATION>': with --period {} it must be \
             shorter than {} (half the period), or a host that starts late could run the job \
             a second time",
            crate::log::show(delay),
            crate::log::show(period),
            crate::log::show(hold)
        )));
    }
    Ok(Some(hold))
}

/// `--queue-max N` (else `$REDLOCK_QUEUE_MAX`): 1 to 10000, and only
/// where a line is kept (a plain lock on one server, see `queue.rs`).
fn queue_max(given: Option<u32>, limit: u32, conn: &Conn) -> Result<Option<u32>, clap::Error> {
    let n = match given {
        Some(n) => n,
        None => match env_text("REDLOCK_QUEUE_MAX")? {
            None => return Ok(None),
            Some(value) => match value.trim().parse::<u32>() {
                Ok(n) if (1..=10_000).contains(&n) => n,
                _ => {
                    return Err(usage(format!(
                        "invalid value {:?} for '$REDLOCK_QUEUE_MAX' (--queue-max): expected \
                         a number of waiters from 1 to 10000",
                        crate::secrets::untrusted(&value)
                    )))
                }
            },
        },
    };
    if limit > 1 || conn.endpoints.len() > 1 {
        return Err(usage(format!(
            "invalid value '{n}' for '--queue-max <N>': waiters stand in line only for a plain \
             lock (--limit 1) on one --redis server (a Sentinel or Cluster URL counts as one)"
        )));
    }
    Ok(Some(n))
}

/// `--shared` with `--limit N > 1`: a semaphore's slots are all alike,
/// so a shared slot of one means nothing; refused (exit 2).
fn shared(shared: bool, limit: u32, replace: bool) -> Result<bool, clap::Error> {
    if shared && replace {
        return Err(usage(
            "--shared cannot be used with --replace-running: a shared run never replaces \
             anyone (shared holders do not exclude each other)"
                .to_string(),
        ));
    }
    if shared && limit > 1 {
        return Err(usage(format!(
            "invalid value '{limit}' for '--limit <N>': --shared takes a lock that any number \
             of shared runs hold at once; it cannot be combined with a semaphore (--limit N)"
        )));
    }
    Ok(shared)
}

/// `--queue`: a policy other than the default needs a line to stand in,
/// which only a plain lock on one server keeps (see `queue.rs`).
fn queue(queue: Queue, limit: u32, conn: &Conn) -> Result<Queue, clap::Error> {
    if queue != Queue::OldestFirst && (limit > 1 || conn.endpoints.len() > 1) {
        return Err(usage(format!(
            "invalid value '{}' for '--queue <POLICY>': waiters stand in line only for a plain \
             lock (--limit 1) on one --redis server (a Sentinel or Cluster URL counts as one)",
            queue.name()
        )));
    }
    Ok(queue)
}

/// `--replace-running`: a plain lock only; its place in line (see
/// `replace::queue`).
fn replacing(
    replace: bool,
    limit: u32,
    (given, queue): (Option<Queue>, Queue),
    conn: &Conn,
) -> Result<Queue, clap::Error> {
    if replace && limit > 1 {
        return Err(usage(format!(
            "invalid value '{limit}' for '--limit <N>': --replace-running replaces the one \
             holder of a plain lock (--limit 1)"
        )));
    }
    let endpoints = conn.endpoints.len();
    Ok(crate::replace::queue(replace, given, queue, endpoints))
}

/// `--metrics-textfile DIR`, else `$REDLOCK_METRICS_DIR`, opened for KEY.
fn metrics_of(
    given: Option<std::path::PathBuf>,
    key: &str,
) -> Result<Option<Metrics>, clap::Error> {
    match given {
        Some(dir) => metrics(Some(&dir), key, "--metrics-textfile <DIR>"),
        None => metrics(
            env_os("REDLOCK_METRICS_DIR")
                .map(std::path::PathBuf::from)
                .as_deref(),
            key,
            "$REDLOCK_METRICS_DIR",
        ),
    }
}

/// `--metrics-textfile DIR`, checked here, before anything is sent to Redis.
fn metrics(
    dir: Option<&std::path::Path>,
    key: &str,
    source: &str,
) -> Result<Option<Metrics>, clap::Error> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    Metrics::open(dir, key).map(Some).map_err(|why| {
        usage(format!(
            "invalid value '{}' for '{source}': {why}",
            dir.display()
        ))
    })
}

/// COMMAND as argv (`sh -c LINE` for `-c`) and as shown in the holder record.
fn command(
    line: Option<String>,
    args: Vec<OsString>,
) -> Result<(Vec<OsString>, String), clap::Error> {
    let (argv, display) = match line {
        Some(line) => (vec!["sh".into(), "-c".into(), line.clone().into()], line),
        None => {
            let display = args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            (args, display)
        }
    };
    if argv.is_empty() {
        return Err(usage(
            "no COMMAND given: add -- COMMAND [ARG...] or -c 'SHELL LINE'".into(),
        ));
    }
    Ok((argv, display))
}

/// `--replicas`, checked against the servers: a number of replicas with
/// several plain servers is refused (independent masters take the place
/// of replication); Sentinel and Cluster nodes each wait for their own.
fn replicas(given: Option<Replicas>, conn: &Conn) -> Result<Replicas, clap::Error> {
    let replicas = given.unwrap_or_default();
    let plain = conn.endpoints.iter().any(|e| !e.is_topology());
    if let Replicas::Exactly(n @ 1..) = replicas {
        if conn.endpoints.len() > 1 && plain {
            return Err(usage(format!(
                "invalid value '{n}' for '--replicas <N|auto>': only with one --redis server, or \
                 with Sentinel and Cluster URLs only; with several plain servers, Redlock's \
                 independent masters take the place of replication"
            )));
        }
    }
    Ok(replicas)
}

fn wait_duration(wait: Wait) -> Option<Duration> {
    match wait {
        Wait::For(d) => Some(d),
        Wait::Forever => None,
    }
}

/// A value out of range, as a usage error naming the option.
fn invalid(e: timing::Invalid) -> clap::Error {
    usage(format!(
        "invalid value '{}' for '{}': {}",
        crate::log::show(e.value),
        e.option,
        e.why
    ))
}

fn usage(message: String) -> clap::Error {
    Cli::command().error(ErrorKind::ValueValidation, message)
}

#[cfg(test)]
mod tests {
    use super::{shared, split_urls};

    #[test]
    fn shared_is_no_semaphore() {
        assert!(shared(true, 1, false).expect("a shared lock"));
        assert!(!shared(false, 3, false).expect("a semaphore"));
        let refused = shared(true, 2, false).expect_err("both").to_string();
        assert!(refused.contains("'2' for '--limit <N>'"), "{refused}");
    }

    #[test]
    fn environment_urls_split_where_a_new_url_begins() {
        assert_eq!(
            split_urls("redis://a:1, redis://b:2,redis://c:3"),
            ["redis://a:1", "redis://b:2", "redis://c:3"]
        );
        assert_eq!(
            split_urls("redis+sentinel://s1,s2:26380/m,redis+cluster://c1:7000,c2:7001,redis://x"),
            [
                "redis+sentinel://s1,s2:26380/m",
                "redis+cluster://c1:7000,c2:7001",
                "redis://x"
            ]
        );
        assert_eq!(split_urls("redis://h"), ["redis://h"]);
    }
}
