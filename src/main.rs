//! redlock-run: run a command while holding a Redis distributed lock.

mod admin;
#[cfg_attr(not(target_env = "musl"), allow(dead_code))]
mod alloc;
mod child;
mod cli;
mod config;
mod docs;
mod doctor;
mod exit;
mod holder;
mod jitter;
mod keyset;
mod lock;
mod log;
mod metrics;
mod plan;
mod queue;
mod refresh;
mod replace;
mod run;
mod secrets;
mod signals;
mod supervise;
mod wait;
mod warn;

use std::process::ExitCode;

use crate::cli::{Cli, Cmd};
use crate::exit::{Exit, Failure};
use crate::log::{Ev, Format, Log, Verbosity};

/// The static (musl) build: dlmalloc (see alloc.rs). glibc builds keep
/// glibc's malloc.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: alloc::Alloc = alloc::Alloc::new();

fn main() -> ExitCode {
    let exit = match cli::parse() {
        Ok(cli) => dispatch(cli),
        Err(e) => usage(e),
    };
    log::flush();
    child::reap_dismissed();
    exit.into()
}

/// A subcommand that talks to Redis.
enum Task {
    /// `status`, `list`, `force-release`, `wait`: about one lock.
    Lock(cli::AdminCmd),
    /// `doctor`: about the servers.
    Doctor(doctor::Options),
}

fn dispatch(cli: Cli) -> Exit {
    let task = match cli.cmd {
        // Needs no Redis, so a bad REDIS_URL must not stop it.
        Some(Cmd::Generate { what }) => {
            return report(docs::print(what), &Log::new(Verbosity::Quiet, Format::Text))
        }
        Some(Cmd::Admin(cmd)) => Some(Task::Lock(cmd)),
        Some(Cmd::Doctor {
            key,
            ttl,
            replicas,
            json,
        }) => Some(Task::Doctor(doctor::Options {
            key,
            ttl,
            replicas: replicas.unwrap_or_default(),
            json,
        })),
        None => None,
    };
    let conn = match config::conn(&cli.conn) {
        Ok(conn) => conn,
        Err(e) => return usage(e),
    };
    let (result, log) = match task {
        None => match config::run(cli.run, &conn) {
            Ok(cfg) => {
                let log = conn.log().for_key(&cfg.key);
                (run::run(conn, cfg, &log), log)
            }
            Err(e) => return usage(e),
        },
        Some(Task::Doctor(doctor)) => {
            let log = conn.log();
            (doctor::run(conn, doctor), log)
        }
        Some(Task::Lock(cmd)) => {
            let cfg = config::admin(cmd, conn);
            let log = cfg.log();
            (admin::run(cfg), log)
        }
    };
    report(result, &log)
}

/// The one error printer: a failure is one event on stderr, then its exit.
fn report(result: Result<Exit, Failure>, log: &Log) -> Exit {
    match result {
        Ok(exit) => exit,
        Err(failure) => {
            let ev = match failure.exit {
                Exit::Unavailable => Ev::Unavailable,
                Exit::Refused => Ev::Refused,
                _ => Ev::Error,
            };
            log.emit(ev, failure.to_string(), &[]);
            failure.exit
        }
    }
}

/// clap's own output: help and version on stdout (exit 0), usage errors
/// in clap's format on stderr (exit 2).
fn usage(e: clap::Error) -> Exit {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // clap's printer: it knows whether stdout takes colours.
            let _ = e.print();
            Exit::Success
        }
        _ => {
            log::raw(e.render().to_string());
            Exit::Usage
        }
    }
}
