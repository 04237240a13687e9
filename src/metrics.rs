//! `--metrics-textfile DIR`: one file per KEY for node_exporter's textfile
//! collector, in the Prometheus text format (0.0.4).
//!
//! [`Metrics::open`] checks DIR before anything is sent to Redis (a bad DIR
//! is a usage error); [`Metrics::acquired`] writes the file when the lock
//! is taken (`redlock_run_running` 1) and [`Metrics::finished`] when the
//! run ends, whatever the outcome (running 0, one more
//! `redlock_run_runs_total` for the outcome). Both are done by a thread of
//! their own ([`Metrics::writer`]), started before COMMAND: nothing on the
//! supervision path waits on DIR. Each write is a
//! read-modify-write of `DIR/redlock_run_<name>.prom` under an exclusive
//! `flock` on `DIR/.redlock_run_<name>.lock` (taken without blocking, tried
//! for a bounded time): the holder and the waiters of one KEY on one host
//! never lose a count. The new text goes to a hidden
//! temp file that is renamed into place, so a scrape never sees half a
//! file. There is no fsync: it costs milliseconds on every run, and the
//! rename alone is what readers need; a host that crashes loses at most
//! the last run's counts. Counters and `last_success` are carried over from the
//! previous file; an unreadable or corrupt previous file counts as empty.
//!
//! A run that never held the lock (busy, unavailable) leaves the start,
//! duration, wait, fence and running gauges as they were, since a holder on
//! this host may be running; so does a run that ends after another run of
//! the same KEY acquired (a later start in the file).
//!
//! The `key` label is KEY as given, with backslash, double quote and
//! newline escaped; other control characters have no escape in the format
//! (Python's parser splits lines at a raw CR), which is fine because
//! `cli::parse_key` refuses them.
//!
//! The encoder and parser are written by hand: `prometheus-client` writes
//! only OpenMetrics (a counter's TYPE line without `_total`, a `# EOF`
//! trailer) rather than the 0.0.4 format the collector reads, and no crate
//! offers the small parser the carry-over needs.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

use crate::log::Log;

/// Bytes of a KEY kept in the file name; longer keys are cut (and hashed).
const MAX_NAME_BYTES: usize = 100;

/// How long a write waits for the file's `flock` (taken without blocking,
/// and tried again) before it gives up with a warning: the holder and the
/// waiters of a KEY hold it for a millisecond; anyone holding it longer
/// costs this run its metrics, nothing else.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// How long the end of a run waits for its last write (a hung mount must
/// not keep redlock-run from exiting).
const FINISH_PATIENCE: Duration = Duration::from_secs(3);

/// A previous file longer than this is not read (it counts as empty).
const MAX_FILE_BYTES: u64 = 1 << 20;
/// How a run ended, as counted in `redlock_run_runs_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// COMMAND ran and exited 0; the only outcome that moves `last_success`.
    Ok,
    /// COMMAND ran and exited non-zero, or could not be started.
    Failed,
    /// The lock stayed busy for longer than `--wait`.
    Busy,
    /// Redis (or a quorum) was unreachable before COMMAND started.
    Unavailable,
    /// The lock was lost while COMMAND ran.
    Lost,
    /// `--max-hold` ran out.
    MaxHold,
    /// redlock-run or COMMAND was ended by a signal.
    Signaled,
}

impl Outcome {
    /// Every outcome, in the order the file lists them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Busy,
        Outcome::Unavailable,
        Outcome::Lost,
        Outcome::MaxHold,
        Outcome::Signaled,
    ];

    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Busy => "busy",
            Outcome::Unavailable => "unavailable",
            Outcome::Lost => "lost",
            Outcome::MaxHold => "max_hold",
            Outcome::Signaled => "signaled",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What [`Metrics::finished`] records about a run.
#[derive(Debug, Clone)]
pub struct Finished {
    pub outcome: Outcome,
    /// When the lock was acquired; `None` if it never was.
    pub start: Option<SystemTime>,
    pub end: SystemTime,
    /// The exit status redlock-run returns for this run.
    pub exit_code: i32,
    /// Time spent waiting for the lock (used only if it was acquired).
    pub wait: Duration,
    /// The fence taken with the lock, if any.
    pub fence: Option<i64>,
    /// Refreshes that failed during this run.
    pub refresh_failures: u64,
    /// COMMAND ran without the lock (`--on-unavailable run`).
    pub unlocked: bool,
}

/// The metrics file of one KEY in one directory.
///
/// Every file in DIR is opened relative to a descriptor of DIR taken at
/// start-up, never following a symbolic link (`O_NOFOLLOW`), never
/// blocking on a FIFO or a device (`O_NONBLOCK`, and anything but a
/// regular file is refused), and the temp file is created new
/// (`O_EXCL`): a link planted in DIR by another user is replaced or
/// refused, never written through.
#[derive(Debug, Clone)]
pub struct Metrics {
    dir: Arc<OwnedFd>,
    /// DIR as given, for messages.
    shown: PathBuf,
    key: String,
    /// `redlock_run_<name>`: the file is `<stem>.prom`.
    stem: String,
}

impl Metrics {
    /// Opens `dir` and checks it: a directory, writable by us (`access(2)`:
    /// no probe file, as this is on every run's start-up path), and not
    /// writable by every user unless sticky (there anyone could replace
    /// our files between two runs). The error is one line naming `dir`.
    pub fn open(dir: &Path, key: &str) -> Result<Metrics, String> {
        let fail = |why: String| format!("metrics directory {}: {why}", dir.display());
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = nix::fcntl::open(dir, flags, Mode::empty()).map_err(|e| match e {
            Errno::ENOTDIR => fail("not a directory".into()),
            e => fail(io::Error::from(e).to_string()),
        })?;
        let stat = fstat(fd.as_fd()).map_err(|e| fail(io::Error::from(e).to_string()))?;
        let mode = Mode::from_bits_truncate(stat.st_mode);
        if mode.contains(Mode::S_IWOTH) && !mode.contains(Mode::S_ISVTX) {
            return Err(fail(
                "writable by every user and not sticky, so anyone could replace the metrics \
                 files (chmod o-w, or chmod +t)"
                    .into(),
            ));
        }
        let writable = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
        nix::unistd::access(dir, writable)
            .map_err(|e| fail(format!("cannot write there: {}", io::Error::from(e))))?;
        Ok(Metrics {
            dir: Arc::new(fd),
            shown: dir.to_path_buf(),
            key: key.to_string(),
            stem: file_stem(key),
        })
    }

    /// The `.prom` file this KEY writes.
    #[cfg(test)]
    pub fn path(&self) -> PathBuf {
        self.shown.join(self.prom())
    }

    fn prom(&self) -> String {
        format!("{}.prom", self.stem)
    }

    /// Starts the thread that writes this run's metrics: the run hands it
    /// what to write and never waits for the file (see [`Writer`]). Made
    /// before COMMAND is spawned. A thread that cannot start costs the
    /// run its metrics, with a warning.
    pub fn writer(&self, log: &Log) -> Writer {
        let (tx, rx) = mpsc::channel::<Write>();
        let (done_tx, done) = mpsc::channel();
        let metrics = self.clone();
        let thread_log = log.clone();
        let started = std::thread::Builder::new()
            .name("metrics".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                for write in rx {
                    let last = matches!(write, Write::Finished(_));
                    let written = match &write {
                        Write::Acquired { start, wait, fence } => {
                            metrics.acquired(*start, *wait, *fence)
                        }
                        Write::Finished(r) => metrics.finished(r),
                    };
                    if let Err(e) = written {
                        thread_log.warn(format!("cannot write the metrics file: {e}"));
                    }
                    if last {
                        let _ = done_tx.send(());
                    }
                }
            });
        let tx = match started {
            Ok(_) => Some(tx),
            Err(e) => {
                log.warn(format!(
                    "cannot start the metrics thread ({e}); this run writes no metrics"
                ));
                None
            }
        };
        Writer {
            tx,
            done,
            shown: self.shown.clone(),
            log: log.clone(),
        }
    }

    /// Records that the lock was acquired at `start` after waiting `wait`,
    /// with `fence`: running 1. Counters are not moved.
    pub fn acquired(&self, start: SystemTime, wait: Duration, fence: i64) -> io::Result<()> {
        self.update(|s| {
            s.running = 1;
            s.start_ms = epoch_ms(start);
            s.wait_ms = duration_ms(wait);
            s.fence = fence;
        })
    }

    /// Records the end of a run: one more run with `r.outcome`, its exit
    /// code, end time and refresh failures (see the module doc for which
    /// gauges a run that did not acquire leaves alone).
    pub fn finished(&self, r: &Finished) -> io::Result<()> {
        self.update(|s| s.finish(r))
    }

    /// Read, change and write the file under the lock.
    fn update(&self, change: impl FnOnce(&mut State)) -> io::Result<()> {
        let lock_name = format!(".{}.lock", self.stem);
        let _lock = self
            .lock(&lock_name)
            .map_err(|e| self.context(&lock_name, e))?;
        let mut state = match self.read(&self.prom()) {
            Ok(text) => State::parse(&text, &self.key),
            Err(_) => State::default(),
        };
        change(&mut state);
        self.write(&state.render(&self.key))
            .map_err(|e| self.context(&self.prom(), e))
    }

    /// `name` in DIR, opened without following a link or blocking; only a
    /// regular file is accepted.
    fn open_at(&self, name: &str, flags: OFlag, mode: u32) -> io::Result<File> {
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let mode = Mode::from_bits_truncate(mode);
        let fd = nix::fcntl::openat(self.dir.as_fd(), name, flags, mode).map_err(|e| match e {
            Errno::ELOOP => io::Error::other("a symbolic link is in its place; not followed"),
            e => e.into(),
        })?;
        let kind = SFlag::from_bits_truncate(fstat(fd.as_fd())?.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFREG {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(File::from(fd))
    }

    /// The KEY's lock file, `flock`ed without blocking: a holder that does
    /// not let go within [`LOCK_PATIENCE`] is an error.
    fn lock(&self, name: &str) -> io::Result<Flock<File>> {
        let rw = OFlag::O_RDWR | OFlag::O_CREAT;
        let mut file = match self.open_at(name, rw, 0o644) {
            // Another user's lock file: flock needs no write access.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                self.open_at(name, OFlag::O_RDONLY, 0)?
            }
            other => other?,
        };
        let give_up = Instant::now() + LOCK_PATIENCE;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(locked),
                Err((back, Errno::EWOULDBLOCK)) if Instant::now() < give_up => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(io::Error::other(format!(
                        "held by another process for more than {}s; not written",
                        LOCK_PATIENCE.as_secs()
                    )))
                }
                Err((_, errno)) => return Err(errno.into()),
            }
        }
    }

    /// The previous file's text (at most [`MAX_FILE_BYTES`]).
    fn read(&self, name: &str) -> io::Result<String> {
        let file = self.open_at(name, OFlag::O_RDONLY, 0)?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES).read_to_string(&mut text)?;
        Ok(text)
    }

    /// Temp file (hidden, not `*.prom`, so the collector skips it), then
    /// rename. Only the lock holder uses the temp name, so one left there
    /// is a crashed run's (or planted): it is removed (the name, never
    /// what a link points to) and the temp file made anew.
    fn write(&self, text: &str) -> io::Result<()> {
        let prom = self.prom();
        let tmp = format!(".{prom}.tmp");
        let new = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
        let mut file = match self.open_at(&tmp, new, 0o644) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                unlinkat(self.dir.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir)?;
                self.open_at(&tmp, new, 0o644)?
            }
            other => other?,
        };
        let written = file.write_all(text.as_bytes()).and_then(|()| {
            nix::fcntl::renameat(
                self.dir.as_fd(),
                tmp.as_str(),
                self.dir.as_fd(),
                prom.as_str(),
            )
            .map_err(io::Error::from)
        });
        if written.is_err() {
            let _ = unlinkat(self.dir.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        written
    }

    fn context(&self, name: &str, e: io::Error) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("{}: {e}", self.shown.join(name).display()),
        )
    }
}

/// What the writer thread is asked to write.
enum Write {
    Acquired {
        start: SystemTime,
        wait: Duration,
        fence: i64,
    },
    Finished(Finished),
}

/// A run's handle on its metrics thread: nothing here touches the file
/// system, so the supervision path never waits on DIR (a held `flock`, a
/// hung mount, a FIFO cost the run its metrics, never its lock).
pub struct Writer {
    tx: Option<mpsc::Sender<Write>>,
    done: mpsc::Receiver<()>,
    shown: PathBuf,
    log: Log,
}

impl Writer {
    /// "Running": queued, written by the thread.
    pub fn acquired(&self, start: SystemTime, wait: Duration, fence: i64) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Write::Acquired { start, wait, fence });
        }
    }

    /// The run's last write: queued, then waited for, at most
    /// [`FINISH_PATIENCE`] (the lock is given back by then).
    pub fn finished(self, r: Finished) {
        let Some(tx) = self.tx else { return };
        if tx.send(Write::Finished(r)).is_err() {
            return;
        }
        drop(tx);
        if let Err(mpsc::RecvTimeoutError::Timeout) = self.done.recv_timeout(FINISH_PATIENCE) {
            self.log.warn(format!(
                "the metrics file in {} was not written within {}s; exiting without it",
                self.shown.display(),
                FINISH_PATIENCE.as_secs()
            ));
        }
    }
}

/// `redlock_run_<KEY>`: `[A-Za-z0-9_-]` kept, anything else `_`, cut to
/// 100 bytes; when anything was replaced or cut, `.` and 16 hex digits of
/// the FNV-1a 64 hash of the exact KEY follow. The dot cannot occur in an
/// unchanged name, so two different keys never share a file. This mapping
/// is part of the contract: changing it orphans existing files.
pub fn file_stem(key: &str) -> String {
    let safe: String = key
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        })
        .take(MAX_NAME_BYTES)
        .collect();
    if safe == key && !key.is_empty() {
        format!("redlock_run_{safe}")
    } else {
        format!("redlock_run_{safe}.{:016x}", fnv1a64(key.as_bytes()))
    }
}

pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What the file says. Times and durations in milliseconds; 0 = never.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct State {
    runs: [u64; 7],
    refresh_failures: u64,
    unlocked_runs: u64,
    running: u8,
    start_ms: u64,
    end_ms: u64,
    success_ms: u64,
    exit_code: i64,
    duration_ms: u64,
    wait_ms: u64,
    fence: i64,
}

impl State {
    fn finish(&mut self, r: &Finished) {
        let slot = &mut self.runs[r.outcome.index()];
        *slot = slot.saturating_add(1);
        self.refresh_failures = self.refresh_failures.saturating_add(r.refresh_failures);
        self.unlocked_runs = self.unlocked_runs.saturating_add(u64::from(r.unlocked));
        self.end_ms = epoch_ms(r.end);
        self.exit_code = i64::from(r.exit_code);
        if r.outcome == Outcome::Ok {
            self.success_ms = self.end_ms;
        }
        let Some(start) = r.start else { return };
        let start_ms = epoch_ms(start);
        self.duration_ms = duration_ms(r.end.duration_since(start).unwrap_or_default());
        // A later start means another run of KEY holds the lock now.
        if start_ms >= self.start_ms {
            self.running = 0;
            self.start_ms = start_ms;
            self.wait_ms = duration_ms(r.wait);
            if let Some(fence) = r.fence {
                self.fence = fence;
            }
        }
    }

    fn render(&self, key: &str) -> String {
        let key = escape_label(key);
        let mut out = String::new();
        header(&mut out, RUNS, "counter", HELP_RUNS);
        for outcome in Outcome::ALL {
            let n = self.runs[outcome.index()];
            let _ = writeln!(
                out,
                "{RUNS}{{key=\"{key}\",outcome=\"{}\"}} {n}",
                outcome.label()
            );
        }
        let gauge = |out: &mut String, name: &str, help: &str, value: &str| {
            header(out, name, "gauge", help);
            let _ = writeln!(out, "{name}{{key=\"{key}\"}} {value}");
        };
        header(&mut out, REFRESH, "counter", HELP_REFRESH);
        let _ = writeln!(out, "{REFRESH}{{key=\"{key}\"}} {}", self.refresh_failures);
        header(&mut out, UNLOCKED, "counter", HELP_UNLOCKED);
        let _ = writeln!(out, "{UNLOCKED}{{key=\"{key}\"}} {}", self.unlocked_runs);
        gauge(&mut out, RUNNING, HELP_RUNNING, &self.running.to_string());
        gauge(&mut out, START, HELP_START, &seconds(self.start_ms));
        gauge(&mut out, END, HELP_END, &seconds(self.end_ms));
        gauge(&mut out, SUCCESS, HELP_SUCCESS, &seconds(self.success_ms));
        gauge(&mut out, EXIT, HELP_EXIT, &self.exit_code.to_string());
        gauge(
            &mut out,
            DURATION,
            HELP_DURATION,
            &seconds(self.duration_ms),
        );
        gauge(&mut out, WAIT, HELP_WAIT, &seconds(self.wait_ms));
        gauge(&mut out, FENCE, HELP_FENCE, &self.fence.to_string());
        out
    }

    /// Reads back what [`State::render`] wrote for `key`; any other line,
    /// or one that does not parse, is ignored.
    fn parse(text: &str, key: &str) -> State {
        let mut state = State::default();
        let samples = text.lines().filter(|l| !l.starts_with('#'));
        for sample in samples.filter_map(parse_sample) {
            if sample.label("key") == Some(key) {
                state.set(sample.name, sample.label("outcome"), sample.value);
            }
        }
        state
    }

    /// Takes one sample's value; `None` (ignored) if it does not parse.
    fn set(&mut self, name: &str, outcome: Option<&str>, value: &str) -> Option<()> {
        match name {
            RUNS => {
                let o = Outcome::ALL
                    .into_iter()
                    .find(|o| Some(o.label()) == outcome)?;
                self.runs[o.index()] = value.parse().ok()?;
            }
            REFRESH => self.refresh_failures = value.parse().ok()?,
            UNLOCKED => self.unlocked_runs = value.parse().ok()?,
            RUNNING => self.running = value.parse::<u8>().ok()?.min(1),
            START => self.start_ms = parse_ms(value)?,
            END => self.end_ms = parse_ms(value)?,
            SUCCESS => self.success_ms = parse_ms(value)?,
            EXIT => self.exit_code = value.parse().ok()?,
            DURATION => self.duration_ms = parse_ms(value)?,
            WAIT => self.wait_ms = parse_ms(value)?,
            FENCE => self.fence = value.parse().ok()?,
            _ => {}
        }
        Some(())
    }
}

const RUNS: &str = "redlock_run_runs_total";
const REFRESH: &str = "redlock_run_refresh_failures_total";
const UNLOCKED: &str = "redlock_run_unlocked_runs_total";
const RUNNING: &str = "redlock_run_running";
const START: &str = "redlock_run_last_start_timestamp_seconds";
const END: &str = "redlock_run_last_end_timestamp_seconds";
const SUCCESS: &str = "redlock_run_last_success_timestamp_seconds";
const EXIT: &str = "redlock_run_last_exit_code";
const DURATION: &str = "redlock_run_last_duration_seconds";
const WAIT: &str = "redlock_run_last_acquire_wait_seconds";
const FENCE: &str = "redlock_run_last_fence";

const HELP_RUNS: &str = "Runs of redlock-run for this key on this host, by outcome.";
const HELP_UNLOCKED: &str =
    "Runs whose command ran without the lock (--on-unavailable run), over all runs of this key on this host.";
const HELP_REFRESH: &str = "Lock refreshes that failed, over all runs of this key on this host.";
const HELP_RUNNING: &str = "1 while a run holds the lock and runs its command, else 0.";
const HELP_START: &str = "Unix time the last run acquired the lock (0: never).";
const HELP_END: &str = "Unix time the last run ended (0: never).";
const HELP_SUCCESS: &str = "Unix time the last run whose command exited 0 ended (0: never).";
const HELP_EXIT: &str = "Exit status of redlock-run in the last run.";
const HELP_DURATION: &str = "Seconds the last run that acquired held the lock.";
const HELP_WAIT: &str = "Seconds the last run that acquired waited for the lock.";
const HELP_FENCE: &str = "Fencing token of the last run that acquired (0: none).";

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value in the text format: backslash, double quote and newline
/// escaped.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out
}

/// One sample line as read back: name, labels (unescaped), value text.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(String, String)>,
    value: &'a str,
}

impl Sample<'_> {
    fn label(&self, wanted: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, value)| value.as_str())
    }
}

/// `name{a="x",b="y"} value`, or `name value`; `None` for anything else.
fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let end = line.find(['{', ' '])?;
    let (name, mut rest) = line.split_at(end);
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            rest = rest.trim_start_matches(',');
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, value, after) = parse_label(rest)?;
            labels.push((label.to_string(), value));
            rest = after;
        }
    }
    let value = rest.strip_prefix(' ')?.trim_end();
    (!value.is_empty() && !value.contains(' ')).then_some(Sample {
        name,
        labels,
        value,
    })
}

/// `name="escaped value"` at the start of `text`: name, unescaped value,
/// and the rest.
fn parse_label(text: &str) -> Option<(&str, String, &str)> {
    let (name, rest) = text.split_once("=\"")?;
    let mut value = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((name, value, &rest[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            _ => value.push(c),
        }
    }
    None
}

/// Milliseconds as seconds with three decimals.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Reads what [`seconds`] wrote (digits, optionally `.` and up to three
/// more); anything else is `None`.
fn parse_ms(value: &str) -> Option<u64> {
    let (whole, frac) = value.split_once('.').unwrap_or((value, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(frac) || frac.len() > 3 {
        return None;
    }
    let frac_ms = format!("{frac:0<3}").parse::<u64>().ok()?;
    whole
        .parse::<u64>()
        .ok()?
        .checked_mul(1000)?
        .checked_add(frac_ms)
}

fn epoch_ms(t: SystemTime) -> u64 {
    duration_ms(t.duration_since(UNIX_EPOCH).unwrap_or_default())
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn run(outcome: Outcome, start_ms: Option<u64>, end_ms: u64) -> Finished {
        Finished {
            outcome,
            start: start_ms.map(at),
            end: at(end_ms),
            exit_code: if outcome == Outcome::Ok { 0 } else { 3 },
            wait: Duration::from_millis(250),
            fence: start_ms.map(|_| 7),
            refresh_failures: 2,
            unlocked: start_ms.is_none() && outcome == Outcome::Ok,
        }
    }

    fn read(m: &Metrics) -> State {
        State::parse(&fs::read_to_string(m.path()).unwrap(), &m.key)
    }

    #[test]
    fn file_names_are_safe_and_distinct() {
        assert_eq!(
            file_stem("nightly-backup_2"),
            "redlock_run_nightly-backup_2"
        );
        let tricky = [
            "a/b",
            "a.b",
            "a_b",
            "..",
            ".",
            "../../etc/passwd",
            "a b",
            "ü",
            "a\nb",
            "",
            "{app}:job",
            "/",
            "\\",
        ];
        let long = "x".repeat(10_000);
        let long2 = format!("{}y", "x".repeat(9_999));
        let mut names: Vec<String> = tricky.iter().map(|k| file_stem(k)).collect();
        names.push(file_stem(&long));
        names.push(file_stem(&long2));
        let dir = tempfile::tempdir().unwrap();
        for name in &names {
            assert!(name.starts_with("redlock_run_"), "{name}");
            assert!(!name.contains('/') && !name.contains(".."), "{name}");
            assert!(name.len() <= 12 + MAX_NAME_BYTES + 17, "{name}");
        }
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        // Stable across versions (value checked with an independent FNV-1a).
        assert_eq!(file_stem("a/b"), "redlock_run_a_b.e620c3190468cf61");
        assert_eq!(
            file_stem("ü"),
            format!("redlock_run__.{:016x}", fnv1a64("ü".as_bytes()))
        );
        for key in tricky.iter().copied().chain([long.as_str()]) {
            let m = Metrics::open(dir.path(), key).unwrap();
            m.acquired(at(1), Duration::ZERO, 1).unwrap();
            assert_eq!(m.path().parent(), Some(dir.path()));
            assert_eq!(read(&m).running, 1, "{key:?}");
        }
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn label_values_are_escaped_and_read_back() {
        let key = "a\\b\"c\nd}e,f=\"g";
        assert_eq!(escape_label(key), "a\\\\b\\\"c\\nd}e,f=\\\"g");
        let dir = tempfile::tempdir().unwrap();
        let m = Metrics::open(dir.path(), key).unwrap();
        m.finished(&run(Outcome::Ok, Some(1_000), 2_000)).unwrap();
        m.finished(&run(Outcome::Ok, Some(3_000), 4_000)).unwrap();
        assert_eq!(read(&m).runs[0], 2);
        // Lines for another key in the file are not ours.
        assert_eq!(
            State::parse(&fs::read_to_string(m.path()).unwrap(), "a"),
            State::default()
        );
    }

    #[test]
    fn counters_and_last_success_carry_over() {
        let dir = tempfile::tempdir().unwrap();
        let m = Metrics::open(dir.path(), "job").unwrap();
        m.acquired(at(10_000), Duration::from_millis(1_500), 41)
            .unwrap();
        let s = read(&m);
        assert_eq!(
            (s.running, s.start_ms, s.wait_ms, s.fence),
            (1, 10_000, 1_500, 41)
        );
        m.finished(&run(Outcome::Ok, Some(10_000), 12_345)).unwrap();
        m.finished(&run(Outcome::Failed, Some(20_000), 20_500))
            .unwrap();
        let s = read(&m);
        assert_eq!(s.runs, [1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(s.refresh_failures, 4);
        assert_eq!(s.success_ms, 12_345);
        assert_eq!((s.end_ms, s.exit_code, s.duration_ms), (20_500, 3, 500));
        assert_eq!((s.running, s.start_ms, s.fence), (0, 20_000, 7));
    }

    #[test]
    fn runs_that_do_not_hold_the_lock_leave_the_holder_alone() {
        let dir = tempfile::tempdir().unwrap();
        let m = Metrics::open(dir.path(), "job").unwrap();
        m.acquired(at(5_000), Duration::ZERO, 9).unwrap();
        // A waiter on this host gives up while the holder runs.
        m.finished(&run(Outcome::Busy, None, 6_000)).unwrap();
        let s = read(&m);
        assert_eq!(
            (s.running, s.start_ms, s.fence, s.runs[2]),
            (1, 5_000, 9, 1)
        );
        // A run that started earlier ends after a later one acquired.
        m.finished(&run(Outcome::Lost, Some(1_000), 7_000)).unwrap();
        let s = read(&m);
        assert_eq!(
            (s.running, s.start_ms, s.fence, s.runs[4]),
            (1, 5_000, 9, 1)
        );
        assert_eq!(s.duration_ms, 6_000);
    }

    #[test]
    fn a_corrupt_previous_file_starts_from_zero() {
        let dir = tempfile::tempdir().unwrap();
        let m = Metrics::open(dir.path(), "job").unwrap();
        fs::write(m.path(), b"\xff\xfe garbage\0").unwrap();
        m.finished(&run(Outcome::Ok, Some(1_000), 2_000)).unwrap();
        assert_eq!(read(&m).runs, [1, 0, 0, 0, 0, 0, 0]);
        let torn = "redlock_run_runs_total{key=\"job\",outcome=\"failed\"} 5\n\
                    redlock_run_runs_total{key=\"job\",outcome=\"ok\"} 1e3\n\
                    redlock_run_runs_total{key=\"job\",outcome=\"busy\"} -1\n\
                    redlock_run_last_fence{key=\"job\"} 12 34\n\
                    redlock_run_last_start_timestamp_seconds{key=\"job\"} 1.2345\n\
                    redlock_run_running{key=\"job\"} 1\n\
                    redlock_run_refresh_failures_total{key=\"jo";
        fs::write(m.path(), torn).unwrap();
        m.finished(&run(Outcome::Ok, Some(1_000), 2_000)).unwrap();
        let s = read(&m);
        assert_eq!(s.runs, [1, 5, 0, 0, 0, 0, 0]);
        assert_eq!((s.fence, s.refresh_failures, s.running), (7, 2, 0));
    }

    #[test]
    fn numbers_read_back_as_written() {
        for ms in [0, 1, 999, 1_000, 1_700_000_000_123, u64::MAX] {
            assert_eq!(parse_ms(&seconds(ms)), Some(ms));
        }
        assert_eq!(parse_ms("12"), Some(12_000));
        assert_eq!(parse_ms("1.5"), Some(1_500));
        for bad in ["", ".5", "1.", "1.2345", "-1", "1e3", "NaN", "+Inf", "1 .2"] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn open_rejects_a_bad_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = Metrics::open(&missing, "k").unwrap_err();
        assert!(
            err.contains(&missing.display().to_string()) && !err.contains('\n'),
            "{err}"
        );
        let file = dir.path().join("file");
        fs::write(&file, "").unwrap();
        let err = Metrics::open(&file, "k").unwrap_err();
        assert!(err.ends_with("not a directory"), "{err}");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "probe left behind"
        );
    }

    #[test]
    fn renders_the_exact_text() {
        let state = State {
            runs: [3, 1, 0, 2, 0, 0, 1],
            refresh_failures: 4,
            unlocked_runs: 5,
            running: 1,
            start_ms: 1_700_000_000_123,
            end_ms: 1_699_999_000_000,
            success_ms: 1_699_998_000_007,
            exit_code: 75,
            duration_ms: 61_050,
            wait_ms: 20,
            fence: 42,
        };
        assert_eq!(state.render("db \"main\""), GOLDEN);
        assert_eq!(State::parse(GOLDEN, "db \"main\""), state);
    }

    const GOLDEN: &str = r#"# HELP redlock_run_runs_total Runs of redlock-run for this key on this host, by outcome.
# TYPE redlock_run_runs_total counter
redlock_run_runs_total{key="db \"main\"",outcome="ok"} 3
redlock_run_runs_total{key="db \"main\"",outcome="failed"} 1
redlock_run_runs_total{key="db \"main\"",outcome="busy"} 0
redlock_run_runs_total{key="db \"main\"",outcome="unavailable"} 2
redlock_run_runs_total{key="db \"main\"",outcome="lost"} 0
redlock_run_runs_total{key="db \"main\"",outcome="max_hold"} 0
redlock_run_runs_total{key="db \"main\"",outcome="signaled"} 1
# HELP redlock_run_refresh_failures_total Lock refreshes that failed, over all runs of this key on this host.
# TYPE redlock_run_refresh_failures_total counter
redlock_run_refresh_failures_total{key="db \"main\""} 4
# HELP redlock_run_unlocked_runs_total Runs whose command ran without the lock (--on-unavailable run), over all runs of this key on this host.
# TYPE redlock_run_unlocked_runs_total counter
redlock_run_unlocked_runs_total{key="db \"main\""} 5
# HELP redlock_run_running 1 while a run holds the lock and runs its command, else 0.
# TYPE redlock_run_running gauge
redlock_run_running{key="db \"main\""} 1
# HELP redlock_run_last_start_timestamp_seconds Unix time the last run acquired the lock (0: never).
# TYPE redlock_run_last_start_timestamp_seconds gauge
redlock_run_last_start_timestamp_seconds{key="db \"main\""} 1700000000.123
# HELP redlock_run_last_end_timestamp_seconds Unix time the last run ended (0: never).
# TYPE redlock_run_last_end_timestamp_seconds gauge
redlock_run_last_end_timestamp_seconds{key="db \"main\""} 1699999000.000
# HELP redlock_run_last_success_timestamp_seconds Unix time the last run whose command exited 0 ended (0: never).
# TYPE redlock_run_last_success_timestamp_seconds gauge
redlock_run_last_success_timestamp_seconds{key="db \"main\""} 1699998000.007
# HELP redlock_run_last_exit_code Exit status of redlock-run in the last run.
# TYPE redlock_run_last_exit_code gauge
redlock_run_last_exit_code{key="db \"main\""} 75
# HELP redlock_run_last_duration_seconds Seconds the last run that acquired held the lock.
# TYPE redlock_run_last_duration_seconds gauge
redlock_run_last_duration_seconds{key="db \"main\""} 61.050
# HELP redlock_run_last_acquire_wait_seconds Seconds the last run that acquired waited for the lock.
# TYPE redlock_run_last_acquire_wait_seconds gauge
redlock_run_last_acquire_wait_seconds{key="db \"main\""} 0.020
# HELP redlock_run_last_fence Fencing token of the last run that acquired (0: none).
# TYPE redlock_run_last_fence gauge
redlock_run_last_fence{key="db \"main\""} 42
"#;

    #[test]
    fn concurrent_runs_never_lose_a_count() {
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..20u64)
            .map(|i| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    // Its own open file, as another process would have.
                    let m = Metrics::open(&dir, "shared/key").unwrap();
                    let outcome = Outcome::ALL[usize::try_from(i % 7).unwrap()];
                    m.finished(&run(outcome, Some(i * 1_000), i * 1_000 + 500))
                        .unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let m = Metrics::open(dir.path(), "shared/key").unwrap();
        let text = fs::read_to_string(m.path()).unwrap();
        let s = State::parse(&text, "shared/key");
        assert_eq!(s.runs.iter().sum::<u64>(), 20);
        assert_eq!(s.runs, [3, 3, 3, 3, 3, 3, 2]);
        assert_eq!(s.refresh_failures, 40);
        assert_eq!(text, s.render("shared/key"), "torn or foreign text");
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".prom") && !n.ends_with(".lock"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
