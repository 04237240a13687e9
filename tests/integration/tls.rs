//! rediss:// with --tls-ca, --tls-cert and --tls-key against a real
//! redis-server with TLS, using certificates made at test time with the
//! `openssl` command (apt-get install openssl).

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A CA, a server certificate for 127.0.0.1 and localhost signed by it, a
/// client certificate signed by it, and a second CA that signed nothing
/// of the server's; EC (P-256) keys, made once per test binary.
struct Pki {
    dir: PathBuf,
}

/// The test binary's one `Pki`, made on first use.
fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(Pki::new)
}

impl Pki {
    /// In the target's temp dir (a static is never dropped, so a temp dir
    /// would be left in /tmp), one per process; those of finished
    /// processes are removed.
    fn new() -> Pki {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tls-pki");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for entry in entries.flatten() {
                let pid = entry.file_name().to_str().and_then(|n| n.parse().ok());
                if pid.is_some_and(|pid| !process_alive(pid)) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = root.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let pki = Pki { dir };
        pki.ca("ca");
        pki.ca("other-ca");
        pki.leaf(
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        pki.leaf("client", "extendedKeyUsage=clientAuth\n");
        // An X.509 v1 client certificate (no extensions): redis-cli takes
        // it, rustls cannot.
        pki.openssl(&[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-out",
            "client-v1.pem",
        ]);
        pki
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run openssl ({e}); install it: apt-get install openssl")
            });
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=redlock-run test {name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn leaf(&self, name: &str, extensions: &str) {
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ]);
        let ext = format!("{name}.ext");
        std::fs::write(
            self.dir.join(&ext),
            format!("basicConstraints=CA:FALSE\n{extensions}"),
        )
        .expect("write extensions");
        self.openssl(&[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &format!("{name}.pem"),
        ]);
    }
}

/// A redis-server with a TLS port besides its plain one: the harness checks
/// readiness, and the test inspects the data, over the plain port.
struct TlsServer {
    server: RedisServer,
    tls_port: u16,
}

impl TlsServer {
    fn start(pki: &Pki, require_client_cert: bool) -> TlsServer {
        let tls_port = free_port();
        let server = RedisServer::builder()
            .arg("--tls-port")
            .arg(&tls_port.to_string())
            .arg("--tls-cert-file")
            .arg(&pki.path("server.pem"))
            .arg("--tls-key-file")
            .arg(&pki.path("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(&pki.path("ca.pem"))
            .arg("--tls-auth-clients")
            .arg(if require_client_cert { "yes" } else { "no" })
            .start();
        TlsServer { server, tls_port }
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}

/// `redlock-run --redis URL ARGS...` with COMMAND writing its fence to a
/// marker file and exiting 7.
fn run_job(url: &str, tls: &[&str], marker: &Path) -> Output {
    let mut cmd = redlock(url);
    cmd.args(tls)
        .args(["-k", "tls-job", "-n", "--", "sh", "-c"]);
    cmd.arg(format!(
        "printf %s \"$REDLOCK_FENCE\" > '{}'; exit 7",
        marker.display()
    ));
    run_with_timeout(&mut cmd, TIMEOUT)
}

#[test]
fn trusted_ca_runs_the_command_under_the_lock() {
    if !have_tls("TLS against this server") {
        return;
    }
    let pki = pki();
    let tls = TlsServer::start(pki, false);
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let out = run_job(&tls.url(), &["--tls-ca", &pki.path("ca.pem")], &marker);
    assert_eq!(out.code, Some(7), "stderr: {}", out.stderr);
    let mut conn = tls.server.conn();
    let fence = get(&mut conn, "redlock:{tls-job}:fence").expect("fence counter");
    assert_eq!(dir.read("ran"), Some(fence.clone()), "COMMAND saw no fence");
    assert!(!exists(&mut conn, "redlock:{tls-job}"), "lock not released");

    // The subcommands take the same options, before or after their name.
    let status = run_with_timeout(
        redlock(&tls.url()).args([
            "--tls-ca",
            &pki.path("ca.pem"),
            "status",
            "tls-job",
            "--json",
        ]),
        TIMEOUT,
    );
    assert_eq!(status.code, Some(1), "free lock: {}", status.stderr);
    let field = format!("\"fence\":{fence}");
    assert!(status.stdout.contains(&field), "{}", status.stdout);
}

#[test]
fn untrusted_server_certificate_is_refused() {
    if !have_tls("TLS against this server") {
        return;
    }
    let pki = pki();
    let tls = TlsServer::start(pki, false);
    let dir = TestDir::new();
    let marker = dir.file("ran");
    for (how, args) in [
        ("another CA", vec!["--tls-ca", &pki.path("other-ca.pem")]),
        // SSL_CERT_FILE points the system store at a bundle without our CA.
        ("system roots", vec![]),
    ] {
        let mut cmd = redlock(&tls.url());
        cmd.env("SSL_CERT_FILE", pki.path("other-ca.pem"))
            .env_remove("SSL_CERT_DIR")
            .args(&args)
            .args(["-k", "tls-job", "-n", "--", "touch"])
            .arg(&marker);
        let out = run_with_timeout(&mut cmd, TIMEOUT);
        assert_eq!(out.code, Some(69), "{how}: stderr: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{how}: {}", out.stderr);
        assert!(
            out.stderr.contains("certificate") && out.stderr.contains("--tls-ca"),
            "{how}: unclear error: {}",
            out.stderr
        );
        assert!(!marker.exists(), "{how}: COMMAND ran");
    }
    assert_eq!(dbsize(&mut tls.server.conn()), 0, "something reached Redis");
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    if !have_tls("TLS against this server") {
        return;
    }
    let pki = pki();
    let tls = TlsServer::start(pki, true);
    let dir = TestDir::new();
    let marker = dir.file("ran");

    let out = run_job(&tls.url(), &["--tls-ca", &pki.path("ca.pem")], &marker);
    assert_eq!(out.code, Some(69), "stderr: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("--tls-cert"), "{}", out.stderr);
    assert!(!marker.exists(), "COMMAND ran without the lock");

    let with_cert = [
        "--tls-ca",
        &pki.path("ca.pem"),
        "--tls-cert",
        &pki.path("client.pem"),
        "--tls-key",
        &pki.path("client.key"),
    ];
    let out = run_job(&tls.url(), &with_cert, &marker);
    assert_eq!(out.code, Some(7), "stderr: {}", out.stderr);
    let fence = get(&mut tls.server.conn(), "redlock:{tls-job}:fence");
    assert_eq!(dir.read("ran"), fence, "COMMAND saw no fence");
    assert!(!exists(&mut tls.server.conn(), "redlock:{tls-job}"));
}

#[test]
fn bad_tls_options_are_usage_errors() {
    let pki = pki();
    // Nothing listens there: exit 2 (not 69) shows nothing was tried.
    let url = format!("rediss://127.0.0.1:{}", free_port());
    let missing = pki.path("missing.pem");
    let cases: Vec<(Vec<String>, &str, String)> = vec![
        (
            vec!["--tls-ca".into(), missing.clone()],
            "--tls-ca",
            missing.clone(),
        ),
        (
            vec!["--tls-ca".into(), pki.path("ca.key")],
            "--tls-ca",
            pki.path("ca.key"),
        ),
        (
            vec!["--tls-cert".into(), pki.path("client.pem")],
            "--tls-key",
            pki.path("client.pem"),
        ),
        (
            vec!["--tls-key".into(), pki.path("client.key")],
            "--tls-cert",
            pki.path("client.key"),
        ),
        (
            vec![
                "--tls-cert".into(),
                pki.path("client.pem"),
                "--tls-key".into(),
                pki.path("client.pem"),
            ],
            "--tls-key",
            pki.path("client.pem"),
        ),
    ];
    for (args, option, value) in cases {
        let out = run_with_timeout(
            redlock(&url)
                .args(&args)
                .args(["-k", "x", "-n", "--", "true"]),
            TIMEOUT,
        );
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(option) && first.contains(&value),
            "{args:?}: first line should name {option} and {value}: {first}"
        );
    }
    // TLS options without a TLS URL would silently do nothing.
    let out = run_with_timeout(
        redlock(&format!("redis://127.0.0.1:{}", free_port())).args([
            "--tls-ca",
            &pki.path("ca.pem"),
            "-k",
            "x",
            "--",
            "true",
        ]),
        TIMEOUT,
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("rediss://"), "{}", out.stderr);
}

/// The client's own files are checked before anything is sent: a key that
/// is not the certificate's, a certificate rustls cannot use (X.509 v1),
/// a FIFO or a device instead of a file. Exit 2 naming the option, at
/// once, even with nothing listening (never "refused" or a hang).
#[test]
fn client_certificate_mistakes_and_files_that_never_end_are_usage_errors() {
    let pki = pki();
    let dir = TestDir::new();
    let fifo = dir.file("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo = fifo.display().to_string();
    let url = format!("rediss://127.0.0.1:{}", free_port());
    let cert = |pem: &str, key: &str| {
        vec![
            "--tls-cert".to_string(),
            pki.path(pem),
            "--tls-key".to_string(),
            pki.path(key),
        ]
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (cert("client.pem", "server.key"), "--tls-key"),
        (cert("client-v1.pem", "client.key"), "--tls-cert"),
        (vec!["--tls-ca".into(), "/dev/zero".into()], "--tls-ca"),
        (vec!["--tls-ca".into(), fifo.clone()], "--tls-ca"),
        (
            vec![
                "--tls-cert".into(),
                pki.path("client.pem"),
                "--tls-key".into(),
                fifo.clone(),
            ],
            "--tls-key",
        ),
    ];
    for (args, option) in cases {
        let out = run_with_timeout(
            redlock(&url)
                .args(&args)
                .args(["-k", "x", "-n", "--", "true"]),
            TIMEOUT,
        );
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(option),
            "{args:?}: should name {option}: {first}"
        );
    }
}
