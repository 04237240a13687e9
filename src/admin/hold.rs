//! `hold KEY --for DURATION --reason TEXT` and `release KEY`: a lock taken
//! with no command (a deploy freeze, a maintenance window), and its early
//! end.
//!
//! A hold is taken as a run takes its lock (the same acquire, wait and
//! line, on one server, Redlock, Sentinel or Cluster), with the TTL
//! `--for` and a holder record that carries the reason and the end
//! (`hold_reason`, `hold_until`), and `ended_at`: there is no job to stop,
//! so a force-release deletes it at once. Nothing refreshes it and no
//! process stays behind: it expires by itself.

use std::time::{Duration, SystemTime};

use super::{force, view, write};
use crate::cli::{HoldArgs, Wait};
use crate::config::Conn;
use crate::exit::{Exit, Failure};
use crate::holder::{describe_holder, hold_record};
use crate::lock::timing::{self, node_timeout};
use crate::lock::{BusyInfo, LockKeys, Quorum};
use crate::log::{field, show, Ev, Log};
use crate::secrets::untrusted;
use crate::wait::{self, Patience, Waited};

/// Take KEY for `--for`; print the token. 0 taken, `-E` (75) busy.
pub fn hold(conn: &Conn, args: &HoldArgs, log: &Log) -> Result<Exit, Failure> {
    let usage = |e: String| Failure {
        exit: Exit::Usage,
        error: anyhow::anyhow!(e),
    };
    let ttl = timing::check("--for <DURATION>", args.duration).map_err(|e| {
        usage(format!(
            "invalid value '{}' for '{}': {}",
            show(e.value),
            e.option,
            e.why
        ))
    })?;
    let label = crate::config::label(args.label.clone()).map_err(|e| usage(e.to_string()))?;
    let patience = Patience {
        wait: match args.wait {
            Wait::For(d) => Some(d),
            Wait::Forever => None,
        },
        progress: Duration::from_secs(60),
    };
    let signals = crate::signals::Signals::start()
        .map_err(|e| Failure::local(e, "cannot set up signal handling"))?;
    let keys = LockKeys::new(&conn.prefix, &args.key);
    let mut quorum = Quorum::new(&conn.endpoints, keys, ttl, node_timeout(ttl))
        .with_replicas(crate::lock::Replicas::default());
    let record = hold_record(&args.reason, &label, ttl);
    let waited = wait::acquire(
        &mut quorum,
        &record,
        patience,
        &args.key,
        &signals,
        log,
        &mut || {},
    )?;
    match waited {
        Waited::Acquired(lease, token, _subscription) => {
            held(args, &label, ttl, lease.fence, log);
            write([token])?;
            Ok(Exit::Success)
        }
        Waited::Busy(info) => Ok(busy(&args.key, &info, args.conflict_exit_code, log)),
        Waited::Replaced(..) => Ok(Exit::Busy(args.conflict_exit_code)),
        Waited::Signaled(sig) => Ok(Exit::Signaled(sig)),
        Waited::Unreachable(error) => Err(Failure {
            exit: Exit::Unavailable,
            error,
        }),
    }
}

/// Say the hold is taken: until when, why, its fence.
fn held(args: &HoldArgs, label: &str, ttl: Duration, fence: i64, log: &Log) {
    let until = SystemTime::now() + ttl;
    log.emit(
        Ev::Acquired,
        format!(
            "holding lock '{}' until {} (--for {}, fence {fence}): {}",
            args.key,
            humantime::format_rfc3339_seconds(until),
            show(ttl),
            untrusted(&args.reason)
        ),
        &[
            field("fence", fence),
            crate::log::ms("ttl_ms", ttl),
            field("reason", args.reason.as_str()),
            crate::holder::label_of(label),
        ],
    );
}

fn busy(key: &str, info: &BusyInfo, code: u8, log: &Log) -> Exit {
    let holder = describe_holder(info);
    log.emit(
        Ev::Busy,
        format!("lock '{key}' {holder}; not taken, exit {code}"),
        &[
            field("holder", holder.clone()),
            crate::holder::label_field(info),
            crate::holder::hold_field(info),
        ],
    );
    Exit::Busy(code)
}

/// `release KEY [--token T]`: end a hold (or, with the token of a running
/// job, revoke that job's lock as `force-release --token` does). 0 done,
/// 1 when KEY is not on hold (free, another token, or a running job
/// without `--token`).
pub fn release(
    quorum: &mut Quorum,
    prefix: &str,
    key: &str,
    token: Option<&str>,
    quiet: bool,
    log: &Log,
) -> Result<Exit, Failure> {
    let views = view::status(quorum, prefix, &[key.to_string()], log)?;
    let Some(seen) = views.first().filter(|v| v.held && v.limit == 0) else {
        log.warn(format!(
            "lock '{}' is not on hold; nothing to release",
            untrusted(key)
        ));
        return Ok(Exit::No);
    };
    let is_hold = seen.holder.hold_reason.is_some();
    let held_by = seen.token.as_deref().unwrap_or_default();
    match token {
        None if !is_hold => {
            log.warn(format!(
                "lock '{}' is held by {}, a running job, not a hold: release ends holds only \
                 and leaves it alone (force-release KEY, or release KEY --token TOKEN, stops it)",
                untrusted(key),
                super::render::who(seen)
            ));
            Ok(Exit::No)
        }
        Some(token) if token != held_by => {
            log.warn(format!(
                "lock '{}' is held by {} with another token; not released",
                untrusted(key),
                super::render::who(seen)
            ));
            Ok(Exit::No)
        }
        // Only if still held by the token seen: a hold that ended and a
        // run that took KEY since are left alone.
        _ => {
            let how = force::Forcing {
                token: Some(held_by),
                now: is_hold,
                quiet,
            };
            force::force_release(quorum, prefix, key, how, log)
        }
    }
}
