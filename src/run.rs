//! The run mode: acquire -> spawn -> supervise -> release.

use std::time::SystemTime;

use anyhow::Context;

use crate::child::{self, Spawned};
use crate::config::{Conn, RunConfig};
use crate::exit::{Exit, Failure, OrExit};
use crate::lock::{Holder, LockKeys};
use crate::log::Log;
use crate::redlock::{Quorum, Released};
use crate::refresh::{Loss, Plan, Refresher};
use crate::signals::SignalRelay;
use crate::wait::{self, Waited};

pub fn run(conn: Conn, cfg: RunConfig) -> Result<Exit, Failure> {
    let log = Log::new(conn.verbosity);
    let signals = SignalRelay::start().context("cannot set up signal handling")?;
    let keys = LockKeys::new(&conn.prefix, &cfg.key);
    let mut quorum = Quorum::new(&conn.endpoints, keys, cfg.ttl, cfg.node_timeout());
    let token = uuid::Uuid::new_v4().to_string();
    let holder = holder(&cfg);

    let lease = match wait::acquire(
        &mut quorum,
        &token,
        &holder,
        cfg.wait,
        &cfg.key,
        &signals,
        &log,
    )? {
        Waited::Acquired(lease) => lease,
        Waited::Busy(info) => {
            log.warn(format!(
                "lock '{}' {}; giving up",
                cfg.key,
                wait::describe_holder(&info)
            ));
            return Ok(Exit::Busy(cfg.conflict_exit_code));
        }
        Waited::Signaled(sig) => return Ok(Exit::Signaled(sig)),
    };
    log.info(format!(
        "acquired lock '{}' (fence {})",
        cfg.key, lease.fence
    ));
    if let Some(sig) = signals.pending() {
        release(&mut quorum, &token, &cfg.key, &log);
        return Ok(Exit::Signaled(sig));
    }

    let fence = lease.fence.to_string();
    let env = [
        ("REDLOCK_KEY", cfg.key.as_str()),
        ("REDLOCK_TOKEN", token.as_str()),
        ("REDLOCK_FENCE", fence.as_str()),
    ];
    let spawned = match child::spawn(&cfg.argv, &env) {
        Ok(spawned) => spawned,
        Err(e) => {
            release(&mut quorum, &token, &cfg.key, &log);
            let exit = child::spawn_error_exit(&e);
            return Err(e)
                .with_context(|| format!("cannot run '{}'", cfg.argv[0].to_string_lossy()))
                .or_exit(exit);
        }
    };
    signals.forward_to(spawned.group.clone());
    let plan = Plan {
        refresh: cfg.refresh,
        kill_after: cfg.kill_after,
        stop_margin: cfg.stop_margin(),
    };
    let refresher = match Refresher::start(
        quorum,
        token.clone(),
        lease,
        plan,
        spawned.group.clone(),
        log,
        cfg.key.clone(),
    ) {
        Ok(refresher) => refresher,
        Err(e) => {
            // Never leave COMMAND running without a refresher.
            spawned.group.signal(nix::sys::signal::Signal::SIGKILL);
            spawned.reap();
            return Err(anyhow::Error::new(e)
                .context("cannot start the refresh thread")
                .into());
        }
    };

    let (exit, quorum, loss) = supervise(spawned, refresher, &cfg, &log);
    let mut quorum = quorum;
    match loss {
        Some(Loss::Replaced | Loss::Gone) => {}
        // Not confirmed is not known lost: give it back if we still can.
        Some(Loss::Unconfirmed(_)) => {
            quorum.release(&token, 1);
        }
        None => release(&mut quorum, &token, &cfg.key, &log),
    }
    Ok(if loss.is_some() { Exit::LockLost } else { exit })
}

/// Wait for COMMAND and its group to be gone, then stop the refresher.
fn supervise(
    spawned: Spawned,
    refresher: Refresher,
    cfg: &RunConfig,
    log: &Log,
) -> (Exit, Quorum, Option<Loss>) {
    spawned.wait_exit();
    let left = spawned.stop_leftovers(cfg.kill_after);
    if left > 0 && !refresher.lost() {
        log.warn(format!(
            "COMMAND exited but left {left} process(es) in its group; stopped them before releasing the lock"
        ));
    }
    let (quorum, loss) = refresher.stop();
    let exit = spawned.reap();
    (exit, quorum, loss)
}

/// Release on every node and say so if anything was not as expected.
fn release(quorum: &mut Quorum, token: &str, key: &str, log: &Log) {
    let Released {
        ours,
        replaced,
        gone,
        errors,
    } = quorum.release(token, 3);
    if replaced > 0 {
        log.error(format!(
            "lock '{key}' was held by another token at release and was left alone; \
             COMMAND may have run unprotected since the last refresh"
        ));
    } else if ours == 0 && gone > 0 {
        log.warn(format!("lock '{key}' had already expired at release"));
    }
    for e in errors {
        log.warn(format!(
            "could not release lock '{key}' ({e:#}); its TTL will clean up"
        ));
    }
    if ours > 0 {
        log.info(format!("released lock '{key}'"));
    }
}

fn holder(cfg: &RunConfig) -> Holder {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into());
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| nix::unistd::getuid().to_string());
    let mut command = cfg.display.clone();
    if command.len() > 1000 {
        let cut = (0..=1000)
            .rev()
            .find(|&i| command.is_char_boundary(i))
            .unwrap_or(0);
        command.truncate(cut);
        command.push('…');
    }
    Holder {
        host,
        pid: std::process::id(),
        user,
        command,
        acquired_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
    }
}
