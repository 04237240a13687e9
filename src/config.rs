//! Flags plus environment, turned into a validated configuration.
//!
//! Everything that can be wrong with the user's input is found here, before
//! anything is sent to Redis, and reported as a clap usage error (exit 2)
//! that names the option and the value, with any password redacted.

use std::ffi::OsString;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::CommandFactory;
use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::cli::{Cli, ConnArgs, OnUnavailable, RunArgs, Wait};
use crate::lock::timing::{self, Timing};
use crate::log::{Format, Log, Verbosity};
use crate::metrics::Metrics;

/// Used when neither `--redis` nor the environment names a server.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// One Redis server, with the form of its URL that is safe to print.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub info: ConnectionInfo,
    /// The URL with its password replaced by `***`.
    pub shown: String,
}

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
        remember_secret(url);
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
    let endpoints = with_tls(endpoints, args)?;
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

fn endpoint(url: &str) -> Result<Endpoint, String> {
    let scheme = url.split("://").next().unwrap_or_default();
    if !url.contains("://") || !matches!(scheme, "redis" | "rediss" | "redis+unix" | "unix") {
        return Err("expected redis://, rediss://, redis+unix:// or unix://".into());
    }
    let info = url
        .into_connection_info()
        .map_err(|e| scrub(&e.to_string()))?;
    // CLIENT SETINFO would cost a round trip on every connect for nothing.
    let redis = info.redis_settings().clone().set_skip_set_lib_name();
    Ok(Endpoint {
        info: info.set_redis_settings(redis),
        shown: redact(url),
    })
}

/// Give every `rediss://` endpoint the CA and client certificate of
/// `--tls-ca`, `--tls-cert` and `--tls-key`, read and checked here so that
/// a bad file is a usage error, not a connection failure.
fn with_tls(endpoints: Vec<Endpoint>, args: &ConnArgs) -> Result<Vec<Endpoint>, clap::Error> {
    let client_tls = match (&args.tls_cert, &args.tls_key) {
        (None, None) => None,
        (Some(cert), None) => {
            return Err(usage(format!(
                "'--tls-cert <FILE>' ({}) needs '--tls-key <FILE>', the certificate's private key",
                cert.display()
            )))
        }
        (None, Some(key)) => {
            return Err(usage(format!(
                "'--tls-key <FILE>' ({}) needs '--tls-cert <FILE>', the client certificate",
                key.display()
            )))
        }
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem("--tls-cert <FILE>", cert, Pem::Certificates)?,
            client_key: read_pem("--tls-key <FILE>", key, Pem::PrivateKey)?,
        }),
    };
    let root_cert = match &args.tls_ca {
        Some(ca) => Some(read_pem("--tls-ca <FILE>", ca, Pem::Certificates)?),
        None => None,
    };
    let is_tls = |e: &Endpoint| matches!(e.info.addr(), redis::ConnectionAddr::TcpTls { .. });
    if !endpoints.iter().any(is_tls) {
        if let Some(option) = [
            (args.tls_ca.is_some(), "--tls-ca"),
            (args.tls_cert.is_some(), "--tls-cert"),
        ]
        .iter()
        .find_map(|(given, option)| given.then_some(option))
        {
            return Err(usage(format!(
                "'{option} <FILE>' was given, but no Redis URL uses TLS (rediss://)"
            )));
        }
        return Ok(endpoints);
    }
    // Only ring is compiled in; installing it explicitly keeps rustls from
    // panicking should another dependency ever enable a second provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certificates = redis::TlsCertificates {
        client_tls,
        root_cert,
    };
    endpoints
        .into_iter()
        .map(|endpoint| {
            if !is_tls(&endpoint) {
                return Ok(endpoint);
            }
            let client = redis::Client::build_with_tls(endpoint.info.clone(), certificates.clone())
                .map_err(|e| {
                    usage(format!(
                        "invalid TLS settings for '{}': {}",
                        endpoint.shown,
                        scrub(&e.to_string())
                    ))
                })?;
            Ok(Endpoint {
                info: client.get_connection_info().clone(),
                shown: endpoint.shown,
            })
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Pem {
    Certificates,
    PrivateKey,
}

/// The bytes of a PEM file, checked to hold what `option` needs.
fn read_pem(option: &str, path: &Path, want: Pem) -> Result<Vec<u8>, clap::Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let invalid = |why: String| {
        usage(format!(
            "invalid value '{}' for '{option}': {why}",
            path.display()
        ))
    };
    let bytes = std::fs::read(path).map_err(|e| invalid(e.to_string()))?;
    match want {
        Pem::Certificates => {
            let certs = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid(format!("not a PEM certificate file: {e}")))?;
            if certs.is_empty() {
                return Err(invalid(
                    "no PEM certificate (BEGIN CERTIFICATE) in it".into(),
                ));
            }
        }
        Pem::PrivateKey => {
            PrivateKeyDer::from_pem_slice(&bytes)
                .map_err(|e| invalid(format!("no PEM private key in it: {e}")))?;
        }
    }
    Ok(bytes)
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
    // Checked here, before anything is sent to Redis.
    let metrics = match &args.metrics_textfile {
        Some(dir) => Some(Metrics::open(dir, &key).map_err(|why| {
            usage(format!(
                "invalid value '{}' for '--metrics-textfile <DIR>': {why}",
                dir.display()
            ))
        })?),
        None => None,
    };
    let wait = match (args.no_wait, args.wait) {
        (true, _) => Some(Duration::ZERO),
        (false, Wait::For(d)) => Some(d),
        (false, Wait::Forever) => None,
    };
    let (argv, display) = match args.command_line {
        Some(line) => (vec!["sh".into(), "-c".into(), line.clone().into()], line),
        None => {
            let display = args
                .args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            (args.args, display)
        }
    };
    if argv.is_empty() {
        return Err(usage(
            "no COMMAND given: add -- COMMAND [ARG...] or -c 'SHELL LINE'".into(),
        ));
    }
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

/// A URL with the password of its user-info part replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let shown = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        // `redis://secret@host` is read as a password by some clients.
        None if userinfo.is_empty() => String::new(),
        None => "***".to_string(),
    };
    format!("{scheme}://{shown}@{}", &rest[at + 1..])
}

static SECRETS: OnceLock<std::sync::Mutex<Vec<String>>> = OnceLock::new();

/// Note the password of `url` so that [`scrub`] can remove it from any text.
fn remember_secret(url: &str) {
    let Some((_, rest)) = url.split_once("://") else {
        return;
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return;
    };
    let userinfo = &rest[..at];
    let secret = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
    if secret.is_empty() {
        return;
    }
    let mut secrets = SECRETS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    secrets.push(secret.to_string());
    // Percent-decoded form too: that is what the client sends and may echo.
    if let Ok(decoded) = percent_decode(secret) {
        secrets.push(decoded);
    }
}

fn percent_decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// `text` with every known password replaced by `***`: the last line of
/// defence for messages that quote what a server or library said.
pub fn scrub(text: &str) -> String {
    let Some(secrets) = SECRETS.get() else {
        return text.to_string();
    };
    let secrets = secrets.lock().unwrap_or_else(|e| e.into_inner());
    secrets
        .iter()
        .filter(|s| s.len() >= 3)
        .fold(text.to_string(), |acc, s| acc.replace(s.as_str(), "***"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact("redis://pw@h"), "redis://***@h");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("rediss://u:p@ss@h"), "rediss://u:***@h");
        assert_eq!(redact("unix:///tmp/x.sock"), "unix:///tmp/x.sock");
    }

    #[test]
    fn scrubbing() {
        remember_secret("redis://u:s%40cret@h");
        assert_eq!(scrub("bad s@cret and s%40cret"), "bad *** and ***");
    }
}
