//! A run's command line in the forms crontabs and CI scripts write, read
//! without clap: `-k KEY [-t TTL] [-w WAIT | -n] [--period P] [-E N]
//! [-q | -v] [--redis URL].. -- COMMAND..` or `-c LINE`. Building clap's
//! command and parsing with it was the largest part of a run's start
//! (0.43 of its 1.03 million instructions, callgrind, and 45 of its 137
//! page faults), in every run, for lines that are nearly always these.
//!
//! Anything else (another option, `--key=K`, `-nq`, a value that starts
//! with `-` or is not UTF-8, an option given twice that clap would
//! refuse, a value its parser refuses, two options that conflict) gives
//! `None`, and clap parses the line as it always did: its errors, help
//! and every other option stay clap's. Where this reads a line, it reads
//! it as clap does: the tests in `cli.rs` parse every option of a run,
//! with many values, both ways and compare the results.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use super::{
    parse_key, parse_positive_duration, parse_progress, parse_wait, Cli, ConnArgs, OnUnavailable,
    RunArgs,
};

/// The run `args` (with the program's name first) asks for, when it is
/// written in the forms above; `None` for clap to read.
pub(super) fn run(args: &[OsString]) -> Option<Cli> {
    let mut cli = Cli {
        conn: conn_defaults(),
        run: run_defaults()?,
        cmd: None,
    };
    let mut words = args.iter().skip(1);
    // The options clap takes once (a second is its error): one bit each.
    let mut once = 0u8;
    let mut take = |bit: u8| {
        let first = once & bit == 0;
        once |= bit;
        first.then_some(())
    };
    let (run, conn) = (&mut cli.run, &mut cli.conn);
    while let Some(word) = words.next() {
        if word == "--" {
            run.args = words.cloned().collect();
            // COMMAND is one word at least, and `-c` is instead of it.
            let whole = !run.args.is_empty() && run.command_line.is_none();
            return (whole && !conflicting(once)).then_some(cli);
        }
        let mut value = || words.next().filter(|v| v.as_bytes().first() != Some(&b'-'));
        let mut text = || value()?.to_str();
        match word.to_str()? {
            "-k" | "--key" => run.key.push(parse_key(text()?).ok()?),
            "-t" | "--ttl" => {
                take(1)?;
                run.ttl = parse_positive_duration(text()?).ok()?;
            }
            "-w" | "--wait" | "--timeout" => {
                take(2)?;
                run.wait = parse_wait(text()?).ok()?;
            }
            "-n" | "--no-wait" | "--nb" | "--nonblock" => run.no_wait = true,
            "--period" => {
                take(4)?;
                run.period = Some(parse_positive_duration(text()?).ok()?);
            }
            "-E" | "--conflict-exit-code" => {
                take(8)?;
                let n = text()?;
                run.conflict_exit_code = match n.bytes().all(|b| b.is_ascii_digit()) {
                    true => n.parse().ok()?,
                    false => return None,
                };
            }
            "-c" | "--command" => {
                take(16)?;
                run.command_line = Some(text()?.to_string());
            }
            "-q" | "--quiet" => {
                take(32)?;
                conn.quiet = true;
            }
            "-v" | "--verbose" => {
                take(64)?;
                conn.verbose = true;
            }
            "--redis" => conn.redis.push(value()?.clone()),
            _ => return None,
        }
    }
    // No `--`: a run of `-c LINE`, else clap's error.
    (run.command_line.is_some() && !conflicting(once)).then_some(cli)
}

/// Whether options given (`once`'s bits) conflict in clap's definition:
/// `--wait` and `--period`, `--quiet` and `--verbose`.
fn conflicting(once: u8) -> bool {
    let both = |a: u8, b: u8| once & a != 0 && once & b != 0;
    both(2, 4) || both(32, 64)
}

/// The connection options' defaults (clap's `default_value`s).
fn conn_defaults() -> ConnArgs {
    ConnArgs {
        redis: Vec::new(),
        prefix: "redlock:".to_string(),
        verbose: false,
        quiet: false,
        log_format: None,
        tls_ca: None,
        tls_cert: None,
        password_file: None,
        tls_key: None,
    }
}

/// A run's defaults (clap's `default_value`s, read by the same parsers).
fn run_defaults() -> Option<RunArgs> {
    Some(RunArgs {
        key: Vec::new(),
        ttl: parse_positive_duration("30s").ok()?,
        refresh: None,
        wait: parse_wait("forever").ok()?,
        no_wait: false,
        exclusive: false,
        period: None,
        conflict_exit_code: 75,
        command_line: None,
        kill_after: None,
        min_hold: None,
        max_hold: None,
        queue: None,
        queue_max: None,
        replace_running: false,
        shared: false,
        limit: 1,
        random_delay: None,
        on_unavailable: OnUnavailable::Fail,
        replicas: None,
        allow_eviction: false,
        warn_signal: None,
        warn_before: None,
        on_lost: None,
        lease_file: false,
        contain: None,
        label: None,
        progress: parse_progress("1m").unwrap_or(Duration::from_secs(60)),
        metrics_textfile: None,
        args: Vec::new(),
    })
}
