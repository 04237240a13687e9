//! One Redis server as the user named it: its URL parsed, checked, and
//! given the TLS settings of `--tls-*`. Errors are plain sentences; the
//! caller turns them into usage errors (exit 2).

use std::path::Path;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::secrets::{redact, scrub};

/// One Redis server, with the form of its URL that is safe to print.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub(super) info: ConnectionInfo,
    /// The URL with its password replaced by `***`.
    pub shown: String,
}

/// The TLS files of `--tls-ca`, `--tls-cert` and `--tls-key`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsFiles<'a> {
    pub ca: Option<&'a Path>,
    pub cert: Option<&'a Path>,
    pub key: Option<&'a Path>,
}

/// Parse one `redis://`, `rediss://`, `redis+unix://` or `unix://` URL.
pub fn endpoint(url: &str) -> Result<Endpoint, String> {
    let scheme = url.split("://").next().unwrap_or_default();
    if !url.contains("://") || !matches!(scheme, "redis" | "rediss" | "redis+unix" | "unix") {
        return Err("expected redis://, rediss://, redis+unix:// or unix://".into());
    }
    if matches!(scheme, "redis" | "rediss") {
        check_port(url)?;
    }
    let info = url
        .into_connection_info()
        .map_err(|e| scrub(&e.to_string()))?;
    let db = info.redis_settings().db();
    if !(0..=i64::from(i32::MAX)).contains(&db) {
        return Err(format!(
            "database {db} is out of range: 0 to {} (and below the server's 'databases')",
            i32::MAX
        ));
    }
    // CLIENT SETINFO would cost a round trip on every connect for nothing.
    let redis = info.redis_settings().clone().set_skip_set_lib_name();
    Ok(Endpoint {
        info: info.set_redis_settings(redis),
        shown: redact(url),
    })
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
    fn is_tls(&self) -> bool {
        matches!(self.info.addr(), ConnectionAddr::TcpTls { .. })
    }

    /// What makes two endpoints the same server and database: scheme,
    /// host (case-insensitive), port and db, or socket path and db.
    fn identity(&self) -> String {
        let db = self.info.redis_settings().db();
        match self.info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                format!("redis {} {port} {db}", host.to_lowercase())
            }
            ConnectionAddr::TcpTls { host, port, .. } => {
                format!("rediss {} {port} {db}", host.to_lowercase())
            }
            ConnectionAddr::Unix(path) => format!("unix {} {db}", path.display()),
            // Not made by `endpoint`: never equal to another.
            other => format!("{other:?}"),
        }
    }
}

/// Refuse the same server given twice: it would count as two Redlock
/// nodes, and one server would make a majority of two alone.
pub fn distinct(endpoints: &[Endpoint]) -> Result<(), String> {
    for (i, endpoint) in endpoints.iter().enumerate() {
        let identity = endpoint.identity();
        if let Some(first) = endpoints[..i].iter().find(|e| e.identity() == identity) {
            return Err(format!(
                "'{}' names the same server and database as '{}': each Redlock node must be \
                 an independent server",
                endpoint.shown, first.shown
            ));
        }
    }
    Ok(())
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
        .map(|endpoint| {
            if !endpoint.is_tls() {
                return Ok(endpoint);
            }
            let client = redis::Client::build_with_tls(endpoint.info.clone(), certificates.clone())
                .map_err(|e| {
                    format!(
                        "invalid TLS settings for '{}': {}",
                        endpoint.shown,
                        scrub(&e.to_string())
                    )
                })?;
            Ok(Endpoint {
                info: client.get_connection_info().clone(),
                shown: endpoint.shown,
            })
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
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem("--tls-cert <FILE>", cert, Pem::Certificates)?,
            client_key: read_pem("--tls-key <FILE>", key, Pem::PrivateKey)?,
        }),
    })
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
