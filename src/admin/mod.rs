//! The admin subcommands: `status`, `list`, `wait`, `force-release`,
//! `hold` and `release` (`hold.rs`).
//!
//! Each reads what Redis holds as a typed value (`view.rs`), shows it as
//! a sentence or JSON (`render.rs`) or a table (`table.rs`) through one
//! stdout writer, or acts on it (`force.rs`, `wait.rs`).

mod force;
mod hold;
mod render;
mod table;
mod view;
mod wait;

use std::time::{Duration, SystemTime};

use anyhow::anyhow;

use crate::config::{AdminConfig, Task};
use crate::exit::{Exit, Failure};
use crate::lock::{LockKeys, Quorum};
use crate::log::{field, Ev, Verbosity};

/// Connect and command timeout per node: an operator at a terminal should
/// not wait long for a dead server, but a busy one deserves a moment.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn run(cfg: AdminConfig) -> Result<Exit, Failure> {
    let conn = &cfg.conn;
    let log = conn.log();
    let prefix = conn.prefix.as_str();
    // The quorum's own key is unused: these calls name their keys.
    let quorum = || {
        Quorum::new(
            &conn.endpoints,
            LockKeys::new(prefix, ""),
            NODE_TIMEOUT,
            NODE_TIMEOUT,
        )
    };
    match &cfg.task {
        Task::Status { keys, json } => {
            let views = view::status(&mut quorum(), prefix, keys, &log)?;
            show(&views, *json, Shape::Status)?;
            Ok(status_exit(&views))
        }
        Task::List { json } => {
            let views = view::list(&mut quorum(), prefix, &log)?;
            if views.is_empty() {
                log.emit(
                    Ev::NoneHeld,
                    format!(
                        "no lock is held under the prefix '{}'",
                        crate::secrets::untrusted(prefix)
                    ),
                    &[field("prefix", prefix)],
                );
            }
            show(&views, *json, Shape::List)?;
            Ok(Exit::Success)
        }
        Task::ForceRelease { key, token, now } => {
            let how = force::Forcing {
                token: token.as_deref(),
                now: *now,
                quiet: conn.verbosity == Verbosity::Quiet,
            };
            force::force_release(&mut quorum(), prefix, key, how, &log)
        }
        Task::Wait {
            key,
            timeout,
            busy_exit,
        } => wait::run(conn, key, *timeout, *busy_exit),
        Task::Hold(args) => hold::hold(conn, args, &log.for_key(&args.key)),
        Task::Release { key, token } => {
            let quiet = conn.verbosity == Verbosity::Quiet;
            let log = log.for_key(key);
            hold::release(&mut quorum(), prefix, key, token.as_deref(), quiet, &log)
        }
    }
}

/// `status`: 0 when every key is held, 1 when any is free; else some key
/// is neither (nodes that did not answer may hold it): 69.
fn status_exit(views: &[view::LockView]) -> Exit {
    if views.iter().all(|v| v.held) {
        Exit::Success
    } else if views.iter().any(|v| !v.held && !v.undecided) {
        Exit::No
    } else {
        Exit::Unavailable
    }
}

/// What is being shown, for the shape of the text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Status,
    List,
}

/// Each view as a line of JSON; as text, one key of `status` as a
/// sentence (with its waiters under it), else a table with a header (no
/// table at all when there is nothing to list).
fn show(views: &[view::LockView], json: bool, shape: Shape) -> Result<(), Failure> {
    let now = SystemTime::now();
    if json {
        return write(views.iter().map(|v| render::json(v, now)));
    }
    match views {
        [] => Ok(()),
        [one] if shape == Shape::Status && !(one.held && one.held_slots().count() > 1) => {
            write([render::text(one, now)])
        }
        views => write(table::table(views, now)),
    }
}

/// The admin commands' one stdout writer: each line, then a newline. A
/// closed pipe (`| head`) ends the output quietly.
fn write(lines: impl IntoIterator<Item = String>) -> Result<(), Failure> {
    let mut text = String::new();
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    crate::log::to_stdout(text.as_bytes()).map_err(|e| Failure {
        exit: Exit::No,
        error: anyhow!("cannot write to stdout: {e}"),
    })
}
