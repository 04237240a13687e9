//! One Redis server as the user named it: its URL parsed, checked, and
//! given the TLS settings of `--tls-*`. Errors are plain sentences; the
//! caller turns them into usage errors (exit 2).

use std::path::Path;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::secrets::{redact, scrub};

/// One Redis server, with the form of its URL that is safe to print.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub(super) target: Target,
    /// The URL with its passwords replaced by `***`.
    pub shown: String,
    /// The CA and client certificate of `--tls-*`, for TLS connections to
    /// nodes found at run time (cluster nodes).
    pub(super) tls: Option<Certificates>,
    /// `--allow-eviction`: an evicting `maxmemory-policy` is a warning,
    /// not a refusal.
    pub(super) allow_eviction: bool,
}

/// What an endpoint names.
#[derive(Debug, Clone)]
pub(super) enum Target {
    /// One server: `redis://`, `rediss://`, `redis+unix://`, `unix://`.
    Plain(ConnectionInfo),
    /// The master of a service, found through its sentinels.
    Sentinel(SentinelTarget),
    /// A Redis Cluster, found through its seed nodes.
    Cluster(Vec<ConnectionInfo>),
}

/// `redis+sentinel://[user:password@]HOST[:PORT][,...]/SERVICE[/DB][?...]`.
#[derive(Debug, Clone)]
pub(super) struct SentinelTarget {
    /// The sentinels, with the `sentinel_username`/`sentinel_password`
    /// of the query.
    pub sentinels: Vec<ConnectionInfo>,
    pub service: String,
    /// The data nodes' user, password, database and TLS settings; its
    /// address is replaced by the master's.
    pub data: ConnectionInfo,
}

/// `--tls-*` files, read; `TlsCertificates` has no `Debug`.
#[derive(Clone)]
pub(super) struct Certificates(pub redis::TlsCertificates);

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Certificates")
    }
}

/// The TLS files of `--tls-ca`, `--tls-cert` and `--tls-key`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsFiles<'a> {
    pub ca: Option<&'a Path>,
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
}

/// The schemes `endpoint` accepts, for error messages.
const SCHEMES: &str = "expected redis://, rediss://, redis+unix://, unix://, \
    redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://";

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// Parse one URL: a server, a Sentinel service, or a Cluster's seeds.
pub fn endpoint(url: &str) -> Result<Endpoint, String> {
    let shown = redact(url);
    // A password's `/` or `?` need not be percent-encoded: the parsers
    // below find the host where `redact` does.
    let url = &crate::secrets::encode_userinfo(url);
    let scheme = url.split("://").next().unwrap_or_default();
    let target = match (url.contains("://"), scheme) {
        (true, "redis" | "rediss" | "redis+unix" | "unix") => Target::Plain(plain(url)?),
        (true, "redis+sentinel" | "rediss+sentinel") => Target::Sentinel(sentinel(url)?),
        (true, "redis+cluster" | "rediss+cluster") => Target::Cluster(cluster(url)?),
        _ => return Err(SCHEMES.into()),
    };
    Ok(Endpoint {
        target,
        shown,
        tls: None,
        allow_eviction: false,
    })
}

/// One server's URL as redis-rs reads it, checked.
fn plain(url: &str) -> Result<ConnectionInfo, String> {
    let scheme = url.split("://").next().unwrap_or_default();
    if matches!(scheme, "redis" | "rediss") {
        check_port(url)?;
    }
    let info = url
        .into_connection_info()
        .map_err(|e| scrub(&e.to_string()))?;
    check_db(info.redis_settings().db())?;
    // CLIENT SETINFO would cost a round trip on every connect for nothing.
    let redis = info.redis_settings().clone().set_skip_set_lib_name();
    Ok(info.set_redis_settings(redis))
}

fn check_db(db: i64) -> Result<(), String> {
    if !(0..=i64::from(i32::MAX)).contains(&db) {
        return Err(format!(
            "database {db} is out of range: 0 to {} (and below the server's 'databases')",
            i32::MAX
        ));
    }
    Ok(())
}

/// A URL with several hosts, cut into its parts.
struct Parts<'a> {
    /// `redis` or `rediss`: the scheme of each node.
    scheme: &'static str,
    userinfo: Option<&'a str>,
    hosts: Vec<&'a str>,
    /// After the hosts, without the leading `/`.
    path: &'a str,
    query: &'a str,
}

fn parts(url: &str) -> Result<Parts<'_>, String> {
    let (scheme, rest) = url.split_once("://").unwrap_or_default();
    let scheme = match scheme.starts_with("rediss") {
        true => "rediss",
        false => "redis",
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (userinfo, hosts) = match rest[..end].rsplit_once('@') {
        Some((info, hosts)) => (Some(info), hosts),
        None => (None, &rest[..end]),
    };
    let (path, query) = rest[end..].split_once('?').unwrap_or((&rest[end..], ""));
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.iter().any(|h| h.trim().is_empty()) {
        return Err("a host is missing: give HOST[:PORT][,HOST[:PORT]...]".into());
    }
    Ok(Parts {
        scheme,
        userinfo,
        hosts,
        path: path.strip_prefix('/').unwrap_or(path),
        query,
    })
}

/// `HOST[:PORT]` with `port` added when it has none.
fn with_port(host: &str, port: u16) -> String {
    let has_port = match host.rfind(']') {
        Some(close) => host[close..].contains(':'),
        None => host.contains(':'),
    };
    match has_port {
        true => host.to_string(),
        false => format!("{host}:{port}"),
    }
}

/// One node of a multi-host URL, as a plain URL of its own.
fn node(
    parts: &Parts,
    host: &str,
    port: u16,
    userinfo: bool,
    db: i64,
) -> Result<ConnectionInfo, String> {
    let info = match (userinfo, parts.userinfo) {
        (true, Some(info)) => format!("{info}@"),
        _ => String::new(),
    };
    plain(&format!(
        "{}://{info}{}/{db}",
        parts.scheme,
        with_port(host, port)
    ))
}

fn sentinel(url: &str) -> Result<SentinelTarget, String> {
    let parts = parts(url)?;
    let (service, db) = match parts.path.split_once('/') {
        Some((service, db)) => (service, db),
        None => (parts.path, ""),
    };
    if service.is_empty() {
        return Err("the SERVICE is missing: redis+sentinel://HOST[:PORT][,...]/SERVICE".into());
    }
    let db = match db {
        "" => 0,
        db => db
            .parse::<i64>()
            .map_err(|_| format!("'{db}' is not a database number"))?,
    };
    let (user, password) = sentinel_credentials(url)?;
    let sentinels = parts
        .hosts
        .iter()
        .map(|host| {
            let info = node(&parts, host, SENTINEL_PORT, false, 0)?;
            let mut settings = info.redis_settings().clone();
            if let Some(user) = &user {
                settings = settings.set_username(user);
            }
            if let Some(password) = &password {
                settings = settings.set_password(password);
            }
            Ok(info.set_redis_settings(settings))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(SentinelTarget {
        sentinels,
        service: service.to_string(),
        data: node(&parts, "127.0.0.1", 6379, true, db)?,
    })
}

/// `sentinel_username` and `sentinel_password`, each given at most once,
/// percent-decoded as the user-info's password is (a `+` stays a `+`).
fn sentinel_credentials(url: &str) -> Result<(Option<String>, Option<String>), String> {
    let (mut user, mut password) = (None, None);
    for (name, range) in crate::secrets::query_pairs(url) {
        let value = percent_encoding::percent_decode_str(&url[range])
            .decode_utf8()
            .map_err(|_| format!("the value of '{name}' is not UTF-8 once decoded"))?
            .into_owned();
        let slot = match name.as_str() {
            "sentinel_username" => &mut user,
            "sentinel_password" => &mut password,
            other => {
                return Err(format!(
                    "unknown option '{}' (known: sentinel_username, sentinel_password)",
                    crate::secrets::untrusted(other)
                ))
            }
        };
        if slot.replace(value).is_some() {
            return Err(format!("'{name}' is given twice"));
        }
    }
    Ok((user, password))
}

fn cluster(url: &str) -> Result<Vec<ConnectionInfo>, String> {
    let parts = parts(url)?;
    if !parts.path.is_empty() && parts.path != "0" {
        return Err("a Redis Cluster has database 0 only: remove the path".into());
    }
    if !parts.query.is_empty() {
        return Err("redis+cluster:// takes no query options".into());
    }
    parts
        .hosts
        .iter()
        .map(|host| node(&parts, host, 6379, true, 0))
        .collect()
}

/// A port the URL parser would only call "did not parse": say why.
fn check_port(url: &str) -> Result<(), String> {
    match url::Url::parse(url) {
        Err(url::ParseError::InvalidPort) => {
            Err("the port must be a number from 1 to 65535".into())
        }
        Ok(parsed) if parsed.port() == Some(0) => {
            Err("the port must be a number from 1 to 65535".into())
        }
        _ => Ok(()),
    }
}

impl Endpoint {
    /// One server found through this endpoint (a master, a Cluster
    /// primary), shown as this endpoint plus its address.
    pub(super) fn plain(&self, info: ConnectionInfo) -> Endpoint {
        let at = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                format!(" ({host}:{port})")
            }
            _ => String::new(),
        };
        Endpoint {
            target: Target::Plain(info),
            shown: format!("{}{at}", self.shown),
            tls: self.tls.clone(),
            allow_eviction: self.allow_eviction,
        }
    }

    /// This endpoint with `--allow-eviction`: a server that may evict the
    /// lock's key is used anyway (the run warns).
    pub fn allowing_eviction(mut self) -> Endpoint {
        self.allow_eviction = true;
        self
    }

    /// Every connection this endpoint names up front: the server, the
    /// sentinels and the data-node template, or the seeds.
    fn infos_mut(&mut self) -> Vec<&mut ConnectionInfo> {
        match &mut self.target {
            Target::Plain(info) => vec![info],
            Target::Sentinel(s) => s.sentinels.iter_mut().chain([&mut s.data]).collect(),
            Target::Cluster(seeds) => seeds.iter_mut().collect(),
        }
    }

    fn is_tls(&self) -> bool {
        let first = match &self.target {
            Target::Plain(info) => info,
            Target::Sentinel(s) => &s.data,
            Target::Cluster(seeds) => match seeds.first() {
                Some(info) => info,
                None => return false,
            },
        };
        matches!(first.addr(), ConnectionAddr::TcpTls { .. })
    }

    /// Whether this endpoint is a Sentinel service or a Cluster: where
    /// `--replicas auto` is the default.
    pub fn is_topology(&self) -> bool {
        !matches!(self.target, Target::Plain(_))
    }

    /// Whether this endpoint is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// What makes two endpoints the same server: for one server, every
    /// address it was resolved to (a socket: its canonical path), so that
    /// `127.0.0.1:P`, `localhost:P` and `127.1:P` are one server, whatever
    /// the database; the same sentinels and service; the same seeds.
    fn identity(&self, deadline: Instant) -> Vec<String> {
        match &self.target {
            Target::Plain(info) => server_addresses(info, deadline),
            Target::Sentinel(s) => {
                let mut hosts: Vec<String> = s.sentinels.iter().map(address).collect();
                hosts.sort();
                vec![format!(
                    "sentinel {} {} {}",
                    s.service,
                    s.data.redis_settings().db(),
                    hosts.join(",")
                )]
            }
            Target::Cluster(seeds) => {
                let mut hosts: Vec<String> = seeds.iter().map(address).collect();
                hosts.sort();
                vec![format!("cluster {}", hosts.join(","))]
            }
        }
    }
}

fn address(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis {} {port} {db}", host.to_lowercase()),
        ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss {} {port} {db}", host.to_lowercase())
        }
        ConnectionAddr::Unix(path) => format!("unix {} {db}", path.display()),
        // Not made by `endpoint`: never equal to another.
        other => format!("{other:?}"),
    }
}

/// Where one server listens, as far as can be told without asking it:
/// each address its host name resolves to (within `deadline`; a name
/// that does not resolve in time stands for itself), or the canonical
/// path of its socket. TLS or not, one port is one server.
fn server_addresses(info: &ConnectionInfo, deadline: Instant) -> Vec<String> {
    let (host, port) = match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host, *port)
        }
        ConnectionAddr::Unix(path) => {
            let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            return vec![format!("unix {}", path.display())];
        }
        other => return vec![format!("{other:?}")],
    };
    let resolved = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![std::net::SocketAddr::new(ip, port)],
        Err(_) => super::dial::resolve(host, port, deadline).unwrap_or_default(),
    };
    if resolved.is_empty() {
        return vec![format!("tcp {} {port}", host.to_lowercase())];
    }
    resolved
        .iter()
        .map(|a| format!("tcp {} {}", a.ip().to_canonical(), a.port()))
        .collect()
}

/// How long `distinct` may spend resolving host names, all of them.
const RESOLVE_LIMIT: Duration = Duration::from_secs(1);

/// Refuse the same server given twice, under any spelling (another host
/// name or IP form for the same address, another database): it would
/// count as two Redlock nodes, and one server would make a majority of two
/// alone. One endpoint needs no check (and no name lookup).
pub fn distinct(endpoints: &[Endpoint]) -> Result<(), String> {
    if endpoints.len() < 2 {
        return Ok(());
    }
    let deadline = Instant::now() + RESOLVE_LIMIT;
    let identities: Vec<Vec<String>> = endpoints.iter().map(|e| e.identity(deadline)).collect();
    for (i, endpoint) in endpoints.iter().enumerate() {
        let same = |other: &Vec<String>| identities[i].iter().find(|a| other.contains(a));
        if let Some((first, at)) = endpoints[..i]
            .iter()
            .zip(&identities)
            .find_map(|(e, other)| same(other).map(|at| (e, at)))
        {
            return Err(format!(
                "'{}' names the same server as '{}' ({}): each Redlock node must be an \
                 independent server",
                endpoint.shown,
                first.shown,
                shown_address(at)
            ));
        }
    }
    Ok(())
}

/// An identity as the error shows it: `127.0.0.1:6379`, a socket path.
fn shown_address(identity: &str) -> String {
    let parts: Vec<&str> = identity.split(' ').collect();
    match parts.as_slice() {
        ["tcp", ip, port] if ip.contains(':') => format!("[{ip}]:{port}"),
        ["tcp", host, port] => format!("{host}:{port}"),
        ["unix", ..] => identity["unix ".len()..].to_string(),
        _ => "the same sentinels and service, or the same seeds".to_string(),
    }
}

/// Give every `rediss://` endpoint the CA and client certificate of the
/// `--tls-*` files, read and checked here so that a bad file is a usage
/// error, not a connection failure.
pub fn with_tls(endpoints: Vec<Endpoint>, files: TlsFiles) -> Result<Vec<Endpoint>, String> {
    let client_tls = client_tls(files)?;
    let root_cert = match files.ca {
        Some(ca) => Some(read_pem("--tls-ca <FILE>", ca, Pem::Certificates)?),
        None => None,
    };
    if !endpoints.iter().any(Endpoint::is_tls) {
        let given = [(files.ca, "--tls-ca"), (files.cert, "--tls-cert")];
        return match given.iter().find(|(file, _)| file.is_some()) {
            Some((_, option)) => Err(format!(
                "'{option} <FILE>' was given, but no Redis URL uses TLS (rediss://)"
            )),
            None => Ok(endpoints),
        };
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
        .map(|mut endpoint| {
            if !endpoint.is_tls() {
                return Ok(endpoint);
            }
            let shown = endpoint.shown.clone();
            for info in endpoint.infos_mut() {
                let client = redis::Client::build_with_tls(info.clone(), certificates.clone())
                    .map_err(|e| {
                        format!(
                            "invalid TLS settings for '{shown}': {}",
                            scrub(&e.to_string())
                        )
                    })?;
                *info = client.get_connection_info().clone();
            }
            endpoint.tls = Some(Certificates(certificates.clone()));
            Ok(endpoint)
        })
        .collect()
}

/// The client certificate and key of mutual TLS: both or neither.
fn client_tls(files: TlsFiles) -> Result<Option<redis::ClientTlsConfig>, String> {
    Ok(match (files.cert, files.key) {
        (None, None) => None,
        (Some(cert), None) => {
            return Err(format!(
                "'--tls-cert <FILE>' ({}) needs '--tls-key <FILE>', the certificate's private key",
                cert.display()
            ))
        }
        (None, Some(key)) => {
            return Err(format!(
                "'--tls-key <FILE>' ({}) needs '--tls-cert <FILE>', the client certificate",
                key.display()
            ))
        }
        (Some(cert), Some(key)) => {
            let client_cert = read_pem("--tls-cert <FILE>", cert, Pem::Certificates)?;
            let client_key = read_pem("--tls-key <FILE>", key, Pem::PrivateKey)?;
            check_pair((cert, &client_cert), (key, &client_key))?;
            Some(redis::ClientTlsConfig {
                client_cert,
                client_key,
            })
        }
    })
}

/// The client certificate and key as rustls will take them: checked here,
/// because redis-rs builds the TLS settings only when it connects, and
/// then a mistake in our own files reads as "Redis refused us".
fn check_pair(cert: (&Path, &[u8]), key: (&Path, &[u8])) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let invalid = |option: &str, path: &Path, why: String| {
        format!("invalid value '{}' for '{option}': {why}", path.display())
    };
    let chain = CertificateDer::pem_slice_iter(cert.1)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("--tls-cert <FILE>", cert.0, e.to_string()))?;
    let private = PrivateKeyDer::from_pem_slice(key.1)
        .map_err(|e| invalid("--tls-key <FILE>", key.0, e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    match rustls::sign::CertifiedKey::from_der(chain, private, &provider) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(invalid(
            "--tls-key <FILE>",
            key.0,
            format!("not the private key of '{}' (--tls-cert)", cert.0.display()),
        )),
        Err(rustls::Error::General(why)) => Err(invalid(
            "--tls-key <FILE>",
            key.0,
            format!("a key rustls cannot use: {why}"),
        )),
        Err(e) => Err(invalid(
            "--tls-cert <FILE>",
            cert.0,
            format!(
                "a certificate rustls cannot use ({e}); an X.509 v1 certificate? Make a v3 one \
                 (openssl x509 -req ... -extfile with extendedKeyUsage=clientAuth)"
            ),
        )),
    }
}

#[derive(Clone, Copy)]
enum Pem {
    Certificates,
    PrivateKey,
}

/// The bytes of a PEM file, checked to hold what `option` needs.
fn read_pem(option: &str, path: &Path, want: Pem) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let invalid = |why: String| format!("invalid value '{}' for '{option}': {why}", path.display());
    let bytes = read_small(path, PEM_LIMIT).map_err(invalid)?;
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

/// The most a PEM file may hold: a system's whole CA bundle is a few
/// hundred KiB.
const PEM_LIMIT: u64 = 4 << 20;
/// The most a password file may hold.
const PASSWORD_LIMIT: u64 = 4 << 10;

/// The bytes of a small file the user named: a regular file (a FIFO would
/// block start-up, a device such as /dev/zero never end), opened without
/// waiting for a writer, and at most `limit` bytes read.
pub(crate) fn read_small(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;

    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(format!("larger than {limit} bytes: is it the right file?"));
    }
    Ok(bytes)
}

/// `--password-file FILE`: the password of every endpoint whose URL has
/// none (a Sentinel URL's data nodes; the sentinels keep
/// `sentinel_password`). The file's first line, without its line end.
pub fn with_password(endpoints: Vec<Endpoint>, file: &Path) -> Result<Vec<Endpoint>, String> {
    let bytes = read_small(file, PASSWORD_LIMIT)?;
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let password = text.lines().next().unwrap_or_default();
    if password.is_empty() {
        return Err("its first line is empty: no password in it".into());
    }
    crate::secrets::remember_password(password);
    Ok(endpoints
        .into_iter()
        .map(|mut endpoint| {
            let infos: Vec<&mut ConnectionInfo> = match &mut endpoint.target {
                Target::Plain(info) => vec![info],
                Target::Sentinel(s) => vec![&mut s.data],
                Target::Cluster(seeds) => seeds.iter_mut().collect(),
            };
            for info in infos {
                if info.redis_settings().password().is_none() {
                    let settings = info.redis_settings().clone().set_password(password);
                    *info = info.clone().set_redis_settings(settings);
                }
            }
            endpoint
        })
        .collect())
}
