//! Flags plus environment, turned into a validated configuration.
//!
//! Everything that can be wrong with the user's input is found here, before
//! anything is sent to Redis, and reported as a clap usage error (exit 2)
//! that names the option and the value, with any password redacted.

use std::ffi::OsString;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::CommandFactory;

use crate::cli::{Cli, ConnArgs, OnUnavailable, RunArgs, Wait};
use crate::lock::timing::{self, Timing};
use crate::lock::{distinct, endpoint, with_tls, Endpoint, TlsFiles};
use crate::log::{Format, Log, Verbosity};
use crate::metrics::Metrics;
/// Re-exported for the log: text is scrubbed of passwords at the last step.
pub use crate::secrets::scrub;
use crate::secrets::{redact, remember};

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
    pub key: String,
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
    /// Sleep up to this long before the first attempt.
    pub random_delay: Option<Duration>,
    pub on_unavailable: OnUnavailable,
    /// Replicas that must confirm each write (0: none).
    pub replicas: u32,
    /// `--metrics-textfile`: where the run's metrics go.
    pub metrics: Option<Metrics>,
}

/// The Redis servers and naming options, from flags or environment.
pub fn conn(args: &ConnArgs) -> Result<Conn, clap::Error> {
    let (urls, source) = if !args.redis.is_empty() {
        (args.redis.clone(), "--redis <URL>".to_string())
    } else if let Some((var, value)) = ["REDLOCK_REDIS_URL", "REDIS_URL"].iter().find_map(|var| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (*var, v))
    }) {
        let urls = value.split(',').map(|u| u.trim().to_string()).collect();
        (urls, format!("${var}"))
    } else {
        (vec![DEFAULT_URL.to_string()], "the default URL".to_string())
    };
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
        log_format: args.log_format,
    })
}

/// The run mode's options, checked against each other and the servers.
pub fn run(args: RunArgs, conn: &Conn) -> Result<RunConfig, clap::Error> {
    let key = args.key.ok_or_else(|| {
        usage("the required option --key <KEY> was not given: name the lock with --key KEY".into())
    })?;
    let timing = Timing::new(args.ttl, args.refresh, args.kill_after).map_err(invalid)?;
    for (option, value) in [
        ("--min-hold <DURATION>", args.min_hold),
        ("--max-hold <DURATION>", args.max_hold),
        ("--random-delay <DURATION>", args.random_delay),
        ("--wait <DURATION>", wait_duration(args.wait)),
    ] {
        if let Some(value) = value {
            timing::check(option, value).map_err(invalid)?;
        }
    }
    let metrics = metrics(args.metrics_textfile.as_deref(), &key)?;
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Some(Duration::ZERO),
        (false, Wait::For(d)) => Some(d),
        (false, Wait::Forever) => None,
    };
    let (argv, display) = command(args.command_line, args.args)?;
    if args.replicas > 0 && conn.endpoints.len() > 1 {
        return Err(usage(format!(
            "invalid value '{}' for '--replicas <N>': only with one --redis server; with several, \
             Redlock's independent masters take the place of replication",
            args.replicas
        )));
    }
    Ok(RunConfig {
        key,
        timing,
        wait,
        conflict_exit_code: args.conflict_exit_code,
        argv,
        display,
        min_hold: args.min_hold.filter(|d| !d.is_zero()),
        max_hold: args.max_hold,
        limit: args.limit,
        random_delay: args.random_delay.filter(|d| !d.is_zero()),
        on_unavailable: args.on_unavailable,
        replicas: args.replicas,
        metrics,
    })
}

/// `--metrics-textfile DIR`, checked here, before anything is sent to Redis.
fn metrics(dir: Option<&std::path::Path>, key: &str) -> Result<Option<Metrics>, clap::Error> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    Metrics::open(dir, key).map(Some).map_err(|why| {
        usage(format!(
            "invalid value '{}' for '--metrics-textfile <DIR>': {why}",
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
