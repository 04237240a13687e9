//! The command line, as clap definitions and value parsers.
//!
//! Parsers here check one value at a time (a duration parses, a TTL is not
//! zero, a key has no control characters); rules that relate several
//! options, and everything that reads the environment, live in `config.rs`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{OsStringValueParser, TypedValueParser};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum, ValueHint};

use crate::exit::Exit;
use crate::lock::Replicas;
use crate::log::Format;
use crate::queue::Queue;

mod quick;

/// The examples of the long help (wrapped by [`after_long_help`]).
const EXAMPLES: &str = "  # a nightly job that never overlaps itself across the fleet
  redlock-run --key nightly-backup --ttl 30s -- pg_dump -f /backup/db.sql

  # cron on every host: the job runs once per 5 minutes; the other
  # hosts skip it silently (--period: the schedule's period)
  */5 * * * * redlock-run -k report --period 5m -n -E 0 -q -- make-report

  # who holds the lock, and clear it by hand
  redlock-run status nightly-backup
  redlock-run force-release nightly-backup";

/// Shown by `-h`: where the rest is.
const AFTER_SHORT_HELP: &str = "\
More options (fleet, TLS, replicas, monitoring, Sentinel and Cluster URLs)
and the exit codes: redlock-run --help, or man redlock-run.";

/// The command line as parsed: the derive's definition plus the parts
/// made at run time (the exit codes come from `Exit::ROWS`).
pub fn command() -> clap::Command {
    let width = help_width();
    without_connection_options(Cli::command())
        .term_width(width)
        .after_long_help(after_long_help(width))
}

/// `--redis`, `--prefix`, TLS, `-v` ... mean nothing to `generate`: out
/// of its help and completions (clap_complete lists hidden options too),
/// so it is rebuilt without them once they were handed down. Before its
/// name they are still accepted (`redlock-run --redis X generate man`).
pub fn without_connection_options(mut cmd: clap::Command) -> clap::Command {
    cmd.build();
    cmd.mut_subcommand("generate", |generate| {
        let own = generate
            .get_arguments()
            .filter(|a| !a.is_global_set() && a.get_id() != "help")
            .cloned();
        let mut fresh = clap::Command::new("generate").args(own);
        if let Some(about) = generate.get_about() {
            fresh = fresh.about(about.clone());
        }
        // Names are made once, by the build above.
        if let Some(name) = generate.get_bin_name() {
            fresh = fresh.bin_name(name.to_string());
        }
        fresh
    })
}

/// The width clap wraps help at: the terminal's, else `$COLUMNS`, else 100
/// (clap's own rule, made explicit so that the text wrapped here and
/// clap's wrapping agree).
fn help_width() -> usize {
    let columns = || std::env::var("COLUMNS").ok()?.trim().parse::<usize>().ok();
    terminal_size::terminal_size()
        .map(|(w, _)| usize::from(w.0))
        .or_else(columns)
        .unwrap_or(100)
        .max(40)
}

/// The examples and the exit codes after the long help, wrapped at
/// `width` with their continuation lines indented under the text.
fn after_long_help(width: usize) -> String {
    let mut out = String::from("Examples:\n");
    for line in EXAMPLES.lines() {
        let indent = line.len() - line.trim_start().len();
        let rest = match line.trim_start().starts_with("# ") {
            true => format!("{}# ", " ".repeat(indent)),
            false => " ".repeat(indent + 4),
        };
        let first = &line[..indent];
        out += &hang(first, &rest, &line[indent..], width);
    }
    out += "\nExit status:\n";
    for row in Exit::ROWS {
        let first = format!("  {:<15}", row.code);
        out += &hang(&first, &" ".repeat(first.len()), row.when, width);
    }
    out.trim_end().to_string()
}

/// `text` after `first`, wrapped at spaces to lines shorter than `width`,
/// each further line starting with `rest`.
fn hang(first: &str, rest: &str, text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !empty && line.len() + 1 + word.len() >= width {
            out += line.trim_end();
            out.push('\n');
            line = rest.to_string();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line += word;
        empty = false;
    }
    out += line.trim_end();
    out.push('\n');
    out
}

/// Parse the process's arguments.
pub fn parse() -> Result<Cli, clap::Error> {
    let args: Vec<OsString> = std::env::args_os().collect();
    // The usual run, read without clap (see quick.rs).
    if let Some(cli) = quick::run(&args) {
        return Ok(cli);
    }
    // A run: its own options alone, without the subcommands' (two
    // thirds of the derived command). Only a run parses with them (every
    // word before `--` is an option or its value; a subcommand's name
    // there is an error), and anything else (an error, help, a
    // subcommand) goes on below and is parsed, or refused, as before.
    let mut run = run_command();
    if let Ok(matches) = run.try_get_matches_from_mut(&args) {
        let cli = run_of(&matches);
        // The process ends with the run: freeing the command and its
        // matches piece by piece was 0.12 million of a run's 1.56 million
        // instructions (callgrind).
        std::mem::forget((run, matches, args));
        return cli;
    }
    // An admin command: the derived command alone. What `command`
    // adds changes only help, errors and `generate`, and building it (the
    // whole tree, to rebuild `generate`) was a fifth of a run's
    // instructions (callgrind: 0.45 of 2.65 million); those go the long
    // way, which says and does exactly what it did.
    if let Ok(matches) = Cli::command().try_get_matches_from(&args) {
        if matches.subcommand_name() != Some("generate") {
            return Cli::from_arg_matches(&matches);
        }
    }
    let matches = command()
        .try_get_matches_from(&args)
        .map_err(|e| forgotten_dashes(e, &args))?;
    Cli::from_arg_matches(&matches)
}

/// The command a run parses with: the derived command's own options,
/// without its subcommands (see [`parse`]).
fn run_command() -> clap::Command {
    let cmd = clap::Command::new("redlock-run").version(env!("CARGO_PKG_VERSION"));
    RunArgs::augment_args(ConnArgs::augment_args(cmd))
}

/// A run, from the matches of [`run_command`].
fn run_of(matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
    Ok(Cli {
        conn: ConnArgs::from_arg_matches(matches)?,
        run: RunArgs::from_arg_matches(matches)?,
        cmd: None,
    })
}

/// `redlock-run -k x echo hi`: COMMAND without its `--`. flock needs none,
/// but here a bare word may also be a mistyped subcommand, so the run is
/// refused (exit 2) with the command line that works, when there is one:
/// `--` before the unexpected word makes a run with a --key.
fn forgotten_dashes(e: clap::Error, args: &[OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(word)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let word = OsString::from(word);
    let corrected = (1..args.len())
        .filter(|&i| args[i] == word && !args[..i].iter().any(|a| a == "--"))
        .map(|i| [&args[..i], &["--".into()], &args[i..]].concat())
        .find(|candidate| {
            command()
                .try_get_matches_from(candidate)
                .is_ok_and(|m| m.subcommand().is_none() && m.contains_id("key"))
        });
    let Some(corrected) = corrected else {
        return e;
    };
    let line: Vec<String> = std::iter::once("redlock-run".to_string())
        .chain(
            corrected[1..]
                .iter()
                .map(|a| shell_word(&a.to_string_lossy())),
        )
        .collect();
    command().error(
        ErrorKind::UnknownArgument,
        format!(
            "unexpected argument '{}': COMMAND goes after '--', as in: {}",
            word.to_string_lossy(),
            crate::secrets::redact_urls(&line.join(" "))
        ),
    )
}

/// `word` as a shell reads it back: bare when it is safe, else quoted.
fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Run a command while holding a Redis distributed lock.
///
/// Acquires KEY (SET NX PX with a fresh token), runs COMMAND in its own
/// process group, refreshes the lock while COMMAND runs, stops COMMAND if
/// the lock is lost, and releases the lock when COMMAND exits.
#[derive(Debug, Parser)]
#[command(
    name = "redlock-run",
    version,
    disable_help_subcommand = true,
    subcommand_negates_reqs = true,
    override_usage = "redlock-run [OPTIONS] --key <KEY> -- <COMMAND>...\n       \
                      redlock-run [OPTIONS] --key <KEY> -c <LINE>\n       \
                      redlock-run [OPTIONS] <SUBCOMMAND>",
    subcommand_value_name = "SUBCOMMAND",
    subcommand_help_heading = "Subcommands",
    after_help = AFTER_SHORT_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub conn: ConnArgs,

    #[command(flatten)]
    pub run: RunArgs,

    #[command(subcommand)]
    pub cmd: Option<Cmd>,
}

/// Where Redis is and how to talk about it: shared by every subcommand.
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// Redis server URL; repeat for a Redlock quorum of independent masters
    /// [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]
    // Bytes, not text: `config.rs` names the option without printing the
    // password when they are not UTF-8. The long help puts the default on
    // a line of its own, as clap does.
    #[arg(
        long = "redis",
        value_name = "URL",
        global = true,
        long_help = "Redis server URL; repeat for a Redlock quorum of independent masters\n\n\
                     [default: $REDLOCK_REDIS_URL, else $REDIS_URL, else redis://127.0.0.1:6379]"
    )]
    pub redis: Vec<OsString>,

    /// Namespace of every key this tool writes
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "redlock:",
        value_parser = text(),
        global = true,
        hide_short_help = true
    )]
    pub prefix: String,

    /// Print lock events on stderr
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print nothing but errors
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// How redlock-run's own stderr lines are written: `text`, or `json`
    /// (one object per line)
    ///
    /// [default: text, else $REDLOCK_LOG_FORMAT]
    // The variable is read in `config.rs`, not by clap: its errors name
    // it, and `generate` never reads it.
    #[arg(
        long,
        value_name = "FORMAT",
        value_enum,
        global = true,
        hide_short_help = true
    )]
    pub log_format: Option<Format>,

    /// CA certificates (PEM) to verify rediss:// servers with, instead of
    /// the system's roots
    #[arg(long, value_name = "FILE", global = true, value_hint = ValueHint::FilePath, hide_short_help = true)]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate chain (PEM) for mutual TLS; needs --tls-key
    #[arg(long, value_name = "FILE", global = true, value_hint = ValueHint::FilePath, hide_short_help = true)]
    pub tls_cert: Option<PathBuf>,

    /// Read the password of every URL that has none from FILE's first
    /// line: then it is neither in `ps` nor in COMMAND's environment
    ///
    /// [default: $REDLOCK_PASSWORD_FILE]
    #[arg(long, value_name = "FILE", global = true, value_hint = ValueHint::FilePath, hide_short_help = true)]
    pub password_file: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert
    #[arg(long, value_name = "FILE", global = true, value_hint = ValueHint::FilePath, hide_short_help = true)]
    pub tls_key: Option<PathBuf>,
}

/// Options of the run mode.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Lock name: any non-empty UTF-8 string without control characters;
    /// repeat it to hold several keys, all or nothing
    ///
    /// With several keys, COMMAND starts only once every key is held (they
    /// are taken one at a time, in sorted order, so two runs asking for
    /// the same keys in any order never deadlock), losing any of them is
    /// losing the lock, and all are released together.
    #[arg(short, long, value_name = "KEY", value_parser = lock_name())]
    pub key: Vec<String>,

    /// Lifetime of the lock in Redis; refreshed while COMMAND runs
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration)]
    pub ttl: Duration,

    /// Refresh period; must be shorter than the TTL
    ///
    /// [default: ttl / 3]
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, hide_short_help = true)]
    pub refresh: Option<Duration>,

    /// How long to wait for a busy lock: seconds (10, 0.5), a duration
    /// (30s, 5m) or `forever`; `0` tries once
    ///
    /// flock's spelling --timeout is accepted too.
    #[arg(short, long, alias = "timeout", value_name = "DURATION", default_value = "forever", value_parser = parse_wait)]
    pub wait: Wait,

    /// Do not wait for a busy lock (same as --wait 0; wins over --wait, as
    /// in flock)
    ///
    /// flock's spellings --nb and --nonblock are accepted too.
    #[arg(short = 'n', long, aliases = ["nb", "nonblock"], overrides_with = "no_wait")]
    pub no_wait: bool,

    /// An exclusive lock: the only kind, so this changes nothing; accepted
    /// for flock's -x, -e, --exclusive
    #[arg(
        short = 'x',
        short_alias = 'e',
        long,
        overrides_with = "exclusive",
        hide_short_help = true
    )]
    pub exclusive: bool,

    /// Cron: the schedule's period (5m for */5); run once per period on
    /// however many hosts; implies -n
    ///
    /// The lock is kept half a period after it was taken, even when
    /// COMMAND ends sooner: hosts that start up to half a period later skip
    /// this run, and the next run finds the lock free (the same as
    /// --min-hold PERIOD/2 -n)
    #[arg(long, value_name = "PERIOD", value_parser = parse_positive_duration, conflicts_with_all = ["wait", "min_hold"])]
    pub period: Option<Duration>,

    /// Exit code when the lock could not be had in time
    ///
    /// With 0, a busy lock is the intended outcome (cron on many hosts):
    /// the run prints nothing about it (-v says "skipping this run").
    #[arg(
        short = 'E',
        long,
        value_name = "N",
        default_value_t = 75,
        allow_negative_numbers = true
    )]
    pub conflict_exit_code: u8,

    /// Run LINE with `sh -c` instead of a trailing COMMAND
    #[arg(
        short = 'c',
        long = "command",
        value_name = "LINE",
        value_parser = text(),
        conflicts_with = "args"
    )]
    pub command_line: Option<String>,

    /// Grace between SIGTERM and SIGKILL when COMMAND must be stopped;
    /// shorter than the TTL
    ///
    /// [default: 5s, or ttl / 3 if shorter]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, hide_short_help = true)]
    pub kill_after: Option<Duration>,

    /// Keep the lock at least this long after acquiring it, even if COMMAND
    /// ends sooner (absorbs clock skew between cron hosts)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Fleet options", hide_short_help = true)]
    pub min_hold: Option<Duration>,

    /// Stop COMMAND if it still runs after this long; exit 124
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, help_heading = "Fleet options", hide_short_help = true)]
    pub max_hold: Option<Duration>,

    /// How waiters stand in line: `oldest-first`, `newest-first` (a new
    /// waiter goes to the front) or `newest-wins` (a new waiter replaces
    /// the older ones, which exit 79)
    ///
    /// [default: oldest-first, else $REDLOCK_QUEUE]
    #[arg(
        long,
        value_name = "POLICY",
        value_enum,
        help_heading = "Fleet options",
        hide_short_help = true
    )]
    pub queue: Option<Queue>,

    /// At most N runs wait in line for KEY (1-10000): one more exits at
    /// once with the busy code; under `--queue newest-wins` a newcomer
    /// replaces the waiter instead
    ///
    /// [default: unbounded, else $REDLOCK_QUEUE_MAX]
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=10_000),
        allow_negative_numbers = true,
        help_heading = "Fleet options",
        hide_short_help = true
    )]
    pub queue_max: Option<u32>,

    /// Revoke the run that holds KEY (it is stopped as by force-release and
    /// exits 70, "replaced"), then run once its whole job has ended: CI's
    /// cancel-in-progress. Waits for that end even with -n; never
    /// replaces a hold
    #[arg(long, help_heading = "Fleet options", hide_short_help = true)]
    pub replace_running: bool,

    /// Take KEY shared (flock's -s): any number of shared holders at
    /// once, and no exclusive (default) holder; a waiting exclusive run
    /// goes before shared runs that come after it
    #[arg(short = 's', long)]
    pub shared: bool,

    /// Let up to N holders share KEY (a counting semaphore); every holder
    /// of KEY must use the same N
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=10_000),
        allow_negative_numbers = true,
        help_heading = "Fleet options"
    , hide_short_help = true)]
    pub limit: u32,

    /// Sleep a random time below DURATION before the first attempt
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Fleet options", hide_short_help = true)]
    pub random_delay: Option<Duration>,

    /// When Redis is unavailable: `fail` (exit 69), or `run` COMMAND without
    /// a lock, with a warning
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = OnUnavailable::Fail, help_heading = "Fleet options", hide_short_help = true)]
    pub on_unavailable: OnUnavailable,

    /// After acquiring and after each refresh, require N replicas to
    /// confirm the write (WAIT); `auto`: one when the primary has any
    /// acknowledging (a hung replica is not waited for)
    ///
    /// [default: auto for Sentinel and Cluster URLs, else 0]
    #[arg(
        long,
        value_name = "N|auto",
        value_parser = parse_replicas,
        allow_negative_numbers = true,
        help_heading = "Fleet options",
        hide_short_help = true
    )]
    pub replicas: Option<Replicas>,

    /// Run even on a server that may evict the lock's key (maxmemory with
    /// a maxmemory-policy other than noeviction), with a warning: two
    /// holders may then run at once
    #[arg(long, help_heading = "Fleet options", hide_short_help = true)]
    pub allow_eviction: bool,

    /// Send SIG (USR1, TERM, a number...) to COMMAND's process group
    /// --warn-before ahead of a planned stop: a lease that refreshes fail
    /// to renew, or --max-hold; not sent when there is no time
    #[arg(long, value_name = "SIG", value_parser = crate::warn::parse_signal, requires = "warn_before", help_heading = "Warnings", hide_short_help = true)]
    pub warn_signal: Option<nix::sys::signal::Signal>,

    /// How long before the planned SIGTERM --warn-signal is sent
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, requires = "warn_signal", help_heading = "Warnings", hide_short_help = true)]
    pub warn_before: Option<Duration>,

    /// Run LINE with `sh -c` once after the lock was lost, as COMMAND is
    /// being stopped (REDLOCK_KEY, REDLOCK_FENCE, REDLOCK_LOST_REASON set);
    /// killed after 10s
    #[arg(
        long,
        value_name = "LINE",
        value_parser = text(),
        help_heading = "Warnings",
        hide_short_help = true
    )]
    pub on_lost: Option<String>,

    /// Give COMMAND REDLOCK_LEASE_FILE: a file (in a private directory)
    /// holding the lease's end as Unix milliseconds, updated at each refresh
    #[arg(long, help_heading = "Warnings", hide_short_help = true)]
    pub lease_file: bool,

    /// How the end of COMMAND's whole tree is held: `auto` puts it in a
    /// cgroup of its own where one can be made (cgroup v2, root or a
    /// delegated subtree), else leaves it to the keeper process; `cgroup`
    /// requires one (exit 71 without); `keeper` never makes one;
    /// `pid-namespace` adds a PID namespace whose init is the keeper, so
    /// that the kernel ends the tree even when redlock-run and its keeper
    /// are killed together (root only; COMMAND sees its pid as 2)
    ///
    /// [default: auto, else $REDLOCK_CONTAIN]
    #[arg(
        long,
        value_name = "HOW",
        value_enum,
        help_heading = "Fleet options",
        hide_short_help = true
    )]
    pub contain: Option<Contain>,

    /// A label for this run, shown with it as holder or waiter (status,
    /// list, busy and waiting lines, JSON): a CI job's URL, a ticket
    ///
    /// [default: $REDLOCK_LABEL, else the CI job's URL where GitHub Actions,
    /// GitLab CI or Jenkins set one; --label '' sets none]
    #[arg(
        long,
        value_name = "TEXT",
        value_parser = text(),
        help_heading = "Monitoring",
        hide_short_help = true
    )]
    pub label: Option<String>,

    /// While waiting for a busy lock, say so this often (0: only when it
    /// starts waiting); -q says nothing
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1m",
        value_parser = parse_progress,
        help_heading = "Monitoring",
        hide_short_help = true
    )]
    pub progress: Duration,

    /// Write the run's metrics for node_exporter's textfile collector into
    /// DIR (redlock_run_<KEY>.prom)
    ///
    /// [default: $REDLOCK_METRICS_DIR]
    #[arg(
        long,
        value_name = "DIR",
        value_hint = ValueHint::DirPath,
        help_heading = "Monitoring",
        hide_short_help = true
    )]
    pub metrics_textfile: Option<PathBuf>,

    /// The command to run, after `--`
    #[arg(
        value_name = "COMMAND",
        last = true,
        num_args = 1..,
        id = "args"
    )]
    pub args: Vec<OsString>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Cmd {
    #[command(flatten)]
    Admin(AdminCmd),
    /// Check the servers for every setting that weakens a lock (eviction,
    /// persistence, replicas, rights, clock, Sentinel, Cluster); exit 78 on a
    /// FAIL, 69 when a server cannot be reached, 77 when one refuses us
    ///
    /// Each server's URL once, a PASS, WARN or FAIL line per check under it
    /// with the fix, wrapped at 80 columns, and a summary line.
    Doctor {
        /// The lock whose keys, channels and Cluster slot are checked
        #[arg(short, long, value_name = "KEY", default_value = "doctor", value_parser = lock_name())]
        key: String,
        /// The TTL the runs will use: it sets the per-node timeout and the
        /// clock's drift allowance
        #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = parse_positive_duration)]
        ttl: Duration,
        /// The --replicas the runs will use: checks that many replicas
        /// and the right to WAIT [default: auto for Sentinel and Cluster URLs, else 0]
        #[arg(
            long,
            value_name = "N|auto",
            value_parser = parse_replicas,
            allow_negative_numbers = true,
            long_help = "The --replicas the runs will use: checks that many replicas and the \
                         right to WAIT\n\n[default: auto for Sentinel and Cluster URLs, else 0]"
        )]
        replicas: Option<Replicas>,
        /// One JSON object per check per line
        #[arg(long)]
        json: bool,
    },
    /// Print the man page (roff) or a shell completion script on stdout
    Generate {
        /// What to print
        #[arg(value_name = "WHAT")]
        what: Doc,
    },
}

/// The subcommands that talk to Redis about a lock.
#[derive(Debug, Clone, Subcommand)]
pub enum AdminCmd {
    /// Show who holds each KEY and for how long
    ///
    /// One KEY as a sentence (KEY  held by HOST pid PID (USER) [LABEL] for
    /// 12s, expires in 18s, fence F: COMMAND), its waiters under it;
    /// several KEYs, or a semaphore's holders, as a table: KEY, STATE,
    /// HOLDER, LABEL, HELD FOR, EXPIRES IN, FENCE, WAITERS (NODES) and
    /// COMMAND. The text is for people; --json is the stable interface.
    Status {
        /// Lock names
        #[arg(required = true, value_name = "KEY", value_parser = lock_name())]
        keys: Vec<String>,
        /// One JSON object per key per line
        ///
        /// The stable interface for scripts: key, held, fence, and when
        /// held ttl_ms, token, label and holder (host, pid, user, label,
        /// command, acquired_at, held_ms, expires_ms); a semaphore's holders,
        /// each with its fence, token, ttl_ms and holder; waiters.
        #[arg(long)]
        json: bool,
    },
    /// Show every held lock under the prefix
    ///
    /// A table, as status shows several KEYs; when none is held, a line on
    /// stderr says so (unless -q) and stdout stays empty.
    List {
        /// One JSON object per lock per line (as status --json)
        #[arg(long)]
        json: bool,
    },
    /// Wait until KEY is free, without taking it
    ///
    /// Woken by the release as a waiting run is, never standing in line:
    /// exit 0 once KEY is free (or was given back and taken at once by the
    /// next waiter in line), 75 (or -E N) when --timeout runs out.
    Wait(WaitArgs),
    /// Delete a lock by hand, saying whose it was
    ForceRelease {
        /// Lock name
        #[arg(value_name = "KEY", value_parser = lock_name())]
        key: String,
        /// Delete only if the lock holds this token
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
        /// Delete at once, without waiting for a live holder to stop its
        /// COMMAND first (a waiter may then run beside it); a lock that
        /// --min-hold keeps after its job ended is deleted at once anyway
        #[arg(long)]
        now: bool,
    },
    /// Take KEY with no command until --for has passed (a deploy freeze)
    ///
    /// Prints the hold's token on stdout; exit 0 when taken, 75 (or -E N)
    /// when KEY is busy after --wait. Nothing stays running: the hold
    /// expires by itself, or `release KEY` ends it early. Runs that find
    /// KEY on hold say its reason; -n runs give up, waiting runs wait it out.
    Hold(HoldArgs),
    /// End a hold early (exit 0), 1 when KEY is not on hold
    ///
    /// Without --token only a hold is released, never a running job's lock
    /// (use force-release for that); with --token, the lock that token
    /// holds: a hold is deleted, a running job is revoked as force-release
    /// does (its holder stops COMMAND first).
    Release {
        /// Lock name
        #[arg(value_name = "KEY", value_parser = lock_name())]
        key: String,
        /// Only the lock this token holds (as `hold` printed it)
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
    },
}

/// `hold KEY --for DURATION --reason TEXT`.
#[derive(Debug, Clone, Args)]
pub struct HoldArgs {
    /// Lock name
    #[arg(value_name = "KEY", value_parser = lock_name())]
    pub key: String,
    /// How long the hold lasts; it expires by itself then
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Why KEY is held (shown by status, list, and runs that find it held)
    #[arg(long, value_name = "TEXT", value_parser = reason())]
    pub reason: String,
    /// How long to wait for a busy KEY: a duration, or `forever`
    #[arg(short, long, value_name = "DURATION", default_value = "0", value_parser = parse_wait)]
    pub wait: Wait,
    /// Exit code when KEY is still busy after --wait
    #[arg(
        short = 'E',
        long,
        value_name = "N",
        default_value_t = 75,
        allow_negative_numbers = true
    )]
    pub conflict_exit_code: u8,
    /// A label shown with the hold (a ticket, an incident's URL)
    ///
    /// [default: $REDLOCK_LABEL, else the CI job's URL]
    #[arg(long, value_name = "TEXT", value_parser = text())]
    pub label: Option<String>,
}

/// `wait KEY`: the options of a run's waiting, without the run.
#[derive(Debug, Clone, Args)]
pub struct WaitArgs {
    /// Lock name
    #[arg(value_name = "KEY", value_parser = lock_name())]
    pub key: String,
    /// How long to wait: a duration, or `forever`; `0` looks once
    #[arg(long, value_name = "DURATION", default_value = "forever", value_parser = parse_wait)]
    pub timeout: Wait,
    /// Exit code when KEY is still held at the timeout
    #[arg(
        short = 'E',
        long,
        value_name = "N",
        default_value_t = 75,
        allow_negative_numbers = true
    )]
    pub conflict_exit_code: u8,
}

/// What `generate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Doc {
    Man,
    Bash,
    Zsh,
    Fish,
    Elvish,
    Powershell,
}

/// How COMMAND's tree is held (see src/child/cgroup.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Contain {
    /// A cgroup where one can be made, else the keeper alone.
    Auto,
    /// A cgroup, or exit 71.
    Cgroup,
    /// The keeper alone.
    Keeper,
    /// A cgroup where one can be made, and a PID namespace whose init is
    /// the keeper (the kernel ends the job when the keeper dies, whoever
    /// killed it); COMMAND sees its own pid as 2. Exit 71 without one.
    PidNamespace,
}

/// What to do when Redis cannot be reached before COMMAND starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnUnavailable {
    /// Exit 69; COMMAND does not run.
    Fail,
    /// Run COMMAND without a lock, after a warning.
    Run,
}

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Forever,
    For(Duration),
}

/// A duration: humantime's syntax, or a bare number of seconds as flock
/// and timeout(1) take it (`-w 10`, `0.5`).
fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    if !value.is_empty() && value.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return value
            .parse::<f64>()
            .ok()
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .ok_or_else(|| "not a number of seconds (examples: 10, 0.5, 500ms, 30s, 5m)".into());
    }
    humantime::parse_duration(value)
        .map_err(|e| format!("{e} (examples: 10 seconds, 500ms, 30s, 5m, 1h 30m)"))
}

fn parse_positive_duration(value: &str) -> Result<Duration, String> {
    let d = parse_duration(value)?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

/// `--progress`: 0 (never again), or at least a second.
fn parse_progress(value: &str) -> Result<Duration, String> {
    match parse_duration(value)? {
        d if d.is_zero() || d >= Duration::from_secs(1) => Ok(d),
        _ => Err("must be 0 (say it once) or at least 1s".into()),
    }
}

fn parse_wait(value: &str) -> Result<Wait, String> {
    match value.trim() {
        "forever" | "inf" | "infinity" => Ok(Wait::Forever),
        "0" => Ok(Wait::For(Duration::ZERO)),
        other => parse_duration(other).map(Wait::For),
    }
}

/// `--replicas`: `auto`, or a number of replicas from 0 to 1000.
fn parse_replicas(value: &str) -> Result<Replicas, String> {
    if value.trim() == "auto" {
        return Ok(Replicas::Auto);
    }
    match value.trim().parse::<u32>() {
        Ok(n) if n <= 1000 => Ok(Replicas::Exactly(n)),
        _ => Err("expected auto, or a number of replicas from 0 to 1000".into()),
    }
}

/// A value that must be text: bytes that are not UTF-8 are refused with
/// the option's name (clap's own check names none).
fn text() -> impl TypedValueParser<Value = String> {
    OsStringValueParser::new().try_map(utf8)
}

fn utf8(value: OsString) -> Result<String, String> {
    value
        .into_string()
        .map_err(|_| "not valid UTF-8 (check the locale or the file it came from)".to_string())
}

/// A hold's reason: non-empty text without control characters, at most
/// 500 bytes.
fn reason() -> impl TypedValueParser<Value = String> {
    OsStringValueParser::new().try_map(|value| {
        let value = utf8(value)?;
        match value.trim() {
            "" => Err("a reason must not be empty".to_string()),
            _ if value.chars().any(char::is_control) => {
                Err("a reason must not contain control characters".to_string())
            }
            _ if value.len() > 500 => Err("a reason must be at most 500 bytes".to_string()),
            reason => Ok(reason.to_string()),
        }
    })
}

/// [`parse_key`] for bytes.
fn lock_name() -> impl TypedValueParser<Value = String> {
    OsStringValueParser::new().try_map(|value| parse_key(&utf8(value)?))
}

/// A lock name: non-empty, no control characters (they would corrupt
/// status output and are surely a quoting mistake).
pub fn parse_key(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("a lock name must not be empty".into());
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(format!(
            "a lock name must not contain control characters (found {c:?})"
        ));
    }
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        command().debug_assert();
        run_command().debug_assert();
    }

    /// What the whole command makes of `line`, and what a run's own
    /// options make of it: the same run, or both refuse it.
    fn parsed_both_ways(line: &[&str]) -> (Option<String>, Option<String>) {
        let full = command()
            .try_get_matches_from(line)
            .ok()
            .and_then(|m| Cli::from_arg_matches(&m).ok())
            .filter(|cli| cli.cmd.is_none());
        let fast = run_command()
            .try_get_matches_from(line)
            .ok()
            .and_then(|m| run_of(&m).ok());
        let (full, fast) = (
            full.map(|c| format!("{c:?}")),
            fast.map(|c| format!("{c:?}")),
        );
        // What quick.rs reads, it reads as clap does.
        if let Some(quick) = quick_run(line) {
            assert_eq!(Some(quick), fast, "quick.rs read {line:?} otherwise");
        }
        (full, fast)
    }

    fn quick_run(line: &[&str]) -> Option<String> {
        let args: Vec<OsString> = line.iter().map(OsString::from).collect();
        quick::run(&args).map(|c| format!("{c:?}"))
    }

    /// The options quick.rs reads, with good values and bad.
    const QUICK: &[(&[&str], &[&str])] = &[
        (
            &["-k", "--key"],
            &["k", "", "a b", "status", "-x", "--", "k\u{1}"],
        ),
        (&["-t", "--ttl"], &["30s", "0", "10", "1.5", "", "x", "-1"]),
        (
            &["-w", "--wait", "--timeout"],
            &["0", "forever", "5m", "x", "-1"],
        ),
        (&["-n", "--no-wait", "--nb", "--nonblock"], &[]),
        (&["--period"], &["5m", "0", "x"]),
        (
            &["-E", "--conflict-exit-code"],
            &["0", "75", "255", "256", "+1", "-1", "x"],
        ),
        (&["-c", "--command"], &["echo hi", "", "-x"]),
        (&["-q", "--quiet"], &[]),
        (&["-v", "--verbose"], &[]),
        (&["--redis"], &["redis://127.0.0.1:1", "", "-x"]),
    ];

    /// Lines the README shows (and one with a Redlock quorum): quick.rs
    /// must read them.
    const USUAL: &[&str] = &[
        "--key nightly-backup --ttl 30s -- pg_dump -f /backup/db.sql",
        "-k nightly-backup -v -- job-A",
        "-k report --period 5m -n -E 0 -q -- /usr/local/bin/make-report",
        "-k env-demo -c echo",
        "-k deploy-prod --wait 20m -- ./deploy.sh",
        "--redis redis://a:1 --redis redis://b:1 -k k -- true",
    ];

    /// Each option quick.rs reads, alone and in pairs, before five
    /// tails: whatever it reads, clap reads alike (see
    /// `parsed_both_ways`), and it reads the usual lines.
    #[test]
    fn the_quick_reading_of_a_run_is_claps() {
        let mut given: Vec<Vec<&str>> = Vec::new();
        for (names, values) in QUICK {
            for name in *names {
                match values.is_empty() {
                    true => given.push(vec![name]),
                    false => given.extend(values.iter().map(|v| vec![*name, *v])),
                }
            }
        }
        let tails: [&[&str]; 5] = [
            &["--", "true"],
            &["--", "sh", "--", "-x"],
            &["--"],
            &[],
            &["true"],
        ];
        let mut read = 0;
        for (i, a) in given.iter().enumerate() {
            for b in given.iter().skip(i % 3).step_by(3).chain([&vec![]]) {
                for tail in tails {
                    let line: Vec<&str> = ["redlock-run"]
                        .iter()
                        .chain(a)
                        .chain(b)
                        .chain(tail)
                        .copied()
                        .collect();
                    parsed_both_ways(&line);
                    read += usize::from(quick_run(&line).is_some());
                }
            }
        }
        assert!(read > 1000, "quick.rs read only {read} lines");
        for usual in USUAL {
            let line: Vec<&str> = std::iter::once("redlock-run")
                .chain(usual.split(' '))
                .collect();
            assert!(quick_run(&line).is_some(), "quick.rs left {line:?} to clap");
            assert!(parsed_both_ways(&line).1.is_some(), "{line:?}");
        }
    }

    #[test]
    fn a_run_parses_alike_with_its_own_options_alone() {
        // Every option of a run, alone and with each of these values,
        // before and after --key; each line a run or refused both ways.
        let values = [
            "",
            "1",
            "30s",
            "k",
            "status",
            "redis://127.0.0.1:1",
            "/tmp/x",
            "TERM",
        ];
        let mut runs = 0;
        for arg in run_command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let option = format!("--{long}");
            let takes_value = arg.get_action().takes_values();
            for value in values.iter().filter(|v| takes_value || v.is_empty()) {
                let with: Vec<&str> = match value.is_empty() {
                    true => vec![&option],
                    false => vec![&option, value],
                };
                let mut before = vec!["redlock-run"];
                before.extend(&with);
                before.extend(["-k", "key", "--", "true", "-x"]);
                let mut after = vec!["redlock-run", "-k", "key"];
                after.extend(&with);
                after.extend(["-c", "echo hi"]);
                for line in [before, after] {
                    let (full, fast) = parsed_both_ways(&line);
                    assert_eq!(full, fast, "{line:?}");
                    runs += usize::from(full.is_some());
                }
            }
        }
        assert!(runs > 100, "only {runs} of the lines were runs");
    }

    #[test]
    fn hand_picked_runs_parse_alike_both_ways() {
        for line in [
            &["redlock-run"][..],
            &["redlock-run", "--", "true"],
            &["redlock-run", "-c", "true"],
            &[
                "redlock-run",
                "-k",
                "a",
                "--key",
                "b",
                "-n",
                "--",
                "sh",
                "--",
                "x",
            ],
            &["redlock-run", "-k=a", "-w5", "-E0", "--", "true"],
            &["redlock-run", "-k", "a", "--", "--help"],
        ] {
            let (full, fast) = parsed_both_ways(line);
            assert_eq!(full, fast, "{line:?}");
        }
    }

    /// Not runs: a run's own options refuse them (the whole command then
    /// parses or refuses them, as it did).
    #[test]
    fn what_is_not_a_run_fails_the_runs_own_parse() {
        for line in [
            &["redlock-run", "status", "k"][..],
            &["redlock-run", "-k", "k", "echo", "hi"],
            &["redlock-run", "--help"],
            &["redlock-run", "-h"],
            &["redlock-run", "--version"],
            &["redlock-run", "--redis", "redis://127.0.0.1:1", "doctor"],
            &["redlock-run", "generate", "man"],
        ] {
            assert!(
                run_command().try_get_matches_from(line).is_err(),
                "{line:?}"
            );
        }
    }

    #[test]
    fn durations_and_keys() {
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(
            parse_wait("1h 30m"),
            Ok(Wait::For(Duration::from_secs(5400)))
        );
        assert!(parse_positive_duration("0s").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration(" 0.25 "), Ok(Duration::from_millis(250)));
        assert_eq!(parse_wait("10"), Ok(Wait::For(Duration::from_secs(10))));
        assert!(parse_duration("1.2.3").is_err());
        assert!(parse_duration(".").is_err());
        assert!(parse_duration("30x").is_err());
        assert!(parse_key("").is_err());
        assert!(parse_key("a\nb").is_err());
        assert!(parse_key("a b {c}:d ü").is_ok());
    }
}
