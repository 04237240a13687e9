//! A run's command line in the forms crontabs and CI scripts write, read
//! without clap: `-k KEY [-t TTL] [-w WAIT | -n] [--period P] [-E N]
//! [-q | -v] [--redis URL].. -- COMMAND..` or `-c LINE`. Building clap's
//! command and parsing with it was the largest part of a run's start
//! (0.43 of its 1.03 million instructions, callgrind, and about 40 of
//! its 137 page faults), in every run, for lines that are nearly always
//! these.
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
    // The options clap takes once (a second is its error) given so far.
    let mut once = 0u8;
    while let Some(word) = words.next() {
        if word == "--" {
            cli.run.args = words.cloned().collect();
            // COMMAND is one word at least, and `-c` is instead of it.
            let whole = !cli.run.args.is_empty() && cli.run.command_line.is_none();
            return (whole && !conflicting(once)).then_some(cli);
        }
        once |= option(word.to_str()?, &mut words, &mut cli, once)?;
    }
    // No `--`: a run of `-c LINE`, else clap's error.
    (cli.run.command_line.is_some() && !conflicting(once)).then_some(cli)
}

/// `word`, an option, read into `cli` with its value (the next of
/// `words`): the bit of an option clap takes once, 0 for another; `None`
/// for clap to read (see the module doc).
fn option<'a>(
    word: &str,
    words: &mut impl Iterator<Item = &'a OsString>,
    cli: &mut Cli,
    once: u8,
) -> Option<u8> {
    let (run, conn) = (&mut cli.run, &mut cli.conn);
    let first = |bit: u8| (once & bit == 0).then_some(bit);
    let mut value = || words.next().filter(|v| v.as_bytes().first() != Some(&b'-'));
    let mut text = || value()?.to_str();
    match word {
        "-k" | "--key" => run.key.push(parse_key(text()?).ok()?),
        "-n" | "--no-wait" | "--nb" | "--nonblock" => run.no_wait = true,
        "--redis" => conn.redis.push(value()?.clone()),
        "-t" | "--ttl" => {
            run.ttl = parse_positive_duration(text()?).ok()?;
            return first(TTL);
        }
        "-w" | "--wait" | "--timeout" => {
            run.wait = parse_wait(text()?).ok()?;
            return first(WAIT);
        }
        "--period" => {
            run.period = Some(parse_positive_duration(text()?).ok()?);
            return first(PERIOD);
        }
        "-E" | "--conflict-exit-code" => {
            let n = text().filter(|n| n.bytes().all(|b| b.is_ascii_digit()))?;
            run.conflict_exit_code = n.parse().ok()?;
            return first(EXIT);
        }
        "-c" | "--command" => {
            run.command_line = Some(text()?.to_string());
            return first(LINE);
        }
        "-q" | "--quiet" => {
            conn.quiet = true;
            return first(QUIET);
        }
        "-v" | "--verbose" => {
            conn.verbose = true;
            return first(VERBOSE);
        }
        _ => return None,
    }
    Some(0)
}

/// The options clap takes once, a bit each.
const TTL: u8 = 1;
const WAIT: u8 = 2;
const PERIOD: u8 = 4;
const EXIT: u8 = 8;
const LINE: u8 = 16;
const QUIET: u8 = 32;
const VERBOSE: u8 = 64;

/// Whether options given (`once`) conflict in clap's definition:
/// `--wait` and `--period`, `--quiet` and `--verbose`.
fn conflicting(once: u8) -> bool {
    let both = |a: u8, b: u8| once & a != 0 && once & b != 0;
    both(WAIT, PERIOD) || both(QUIET, VERBOSE)
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
        progress: parse_progress("1m").ok()?,
        metrics_textfile: None,
        args: Vec::new(),
    })
}
