//! The run mode: acquire -> spawn -> supervise -> release.

use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use nix::sys::signal::Signal;

use crate::child::{self, Spawned, StopTimer};
use crate::cli::OnUnavailable;
use crate::config::{Conn, RunConfig};
use crate::exit::{Exit, Failure};
use crate::lock::{Extend, Holder, LockKeys, Quorum, Released};
use crate::log::{show, Log};
use crate::refresh::{Loss, Refresher};
use crate::signals::SignalRelay;
use crate::wait::{self, Waited};

pub fn run(conn: Conn, cfg: RunConfig) -> Result<Exit, Failure> {
    let log = Log::new(conn.verbosity);
    let signals = SignalRelay::start().context("cannot set up signal handling")?;
    if let Some(spread) = cfg.random_delay {
        // A fleet's cron entries fire in the same second; spread them out.
        let delay = wait::jitter(Duration::ZERO, spread);
        log.info(format!(
            "sleeping {} before the first attempt (--random-delay)",
            show(delay)
        ));
        if let Some(sig) = signals.sleep(delay) {
            return Ok(Exit::Signaled(sig));
        }
    }
    let keys = LockKeys::new(&conn.prefix, &cfg.key);
    let mut quorum = Quorum::new(
        &conn.endpoints,
        keys,
        cfg.timing.ttl,
        cfg.timing.node_timeout(),
    )
    .with_replicas(cfg.replicas)
    .with_limit(cfg.limit);
    let token = uuid::Uuid::new_v4().to_string();
    let holder = holder(&cfg);

    let waited = wait::acquire(
        &mut quorum,
        &token,
        &holder,
        cfg.wait,
        &cfg.key,
        &signals,
        &log,
    );
    let lease = match waited {
        Ok(Waited::Acquired(lease)) => lease,
        Ok(Waited::Busy(info)) => {
            log.warn(format!(
                "lock '{}' {}; giving up",
                cfg.key,
                wait::describe_holder(&info)
            ));
            return Ok(Exit::Busy(cfg.conflict_exit_code));
        }
        Ok(Waited::Signaled(sig)) => return Ok(Exit::Signaled(sig)),
        // Only when Redis never answered: never after a refusal or a
        // busy answer (wait.rs decides).
        Ok(Waited::Unreachable(error)) => {
            let failure = Failure {
                exit: Exit::Unavailable,
                error,
            };
            if cfg.on_unavailable != OnUnavailable::Run {
                return Err(failure);
            }
            log.error(format!(
                "WARNING: {failure}; running COMMAND WITHOUT the lock (--on-unavailable run)"
            ));
            return run_unlocked(&cfg, &signals, &log);
        }
        Err(failure) => return Err(failure),
    };
    let acquired_at = lease.acquired_at;
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
    let spawned = match spawn(&cfg, &env) {
        Ok(spawned) => spawned,
        Err(failure) => {
            release(&mut quorum, &token, &cfg.key, &log);
            return Err(failure);
        }
    };
    signals.forward_to(spawned.group.clone());
    let group = spawned.group.clone();
    let refresher = Refresher::start(
        quorum,
        token.clone(),
        lease,
        cfg.timing,
        group,
        log,
        cfg.key.clone(),
    );
    let refresher = match refresher {
        Ok(refresher) => refresher,
        Err(e) => {
            // Never leave COMMAND running without a refresher.
            spawned.group.signal(Signal::SIGKILL);
            spawned.reap();
            return Err(anyhow::Error::new(e)
                .context("cannot start the refresh thread")
                .into());
        }
    };
    let max_hold = max_hold_timer(&cfg, &spawned, &log);

    let exit = finish(spawned, || refresher.lost(), &cfg, &log);
    let (mut quorum, loss) = refresher.stop();
    let timed_out = max_hold.is_some_and(StopTimer::stop);
    match loss {
        Some(Loss::Replaced | Loss::Gone) => return Ok(Exit::LockLost),
        // Not confirmed is not known lost: give it back if we still can.
        Some(Loss::Unconfirmed(_)) => {
            quorum.release(&token, 1);
            return Ok(Exit::LockLost);
        }
        None => {}
    }
    // A job stopped by --max-hold gets no --min-hold on top.
    if timed_out || !hold_on(&mut quorum, &token, acquired_at, &cfg, &log) {
        release(&mut quorum, &token, &cfg.key, &log);
    }
    Ok(if timed_out { Exit::MaxHold } else { exit })
}

/// `--on-unavailable run`: COMMAND without a lock (and without a fence).
fn run_unlocked(cfg: &RunConfig, signals: &SignalRelay, log: &Log) -> Result<Exit, Failure> {
    let spawned = spawn(cfg, &[("REDLOCK_KEY", cfg.key.as_str())])?;
    signals.forward_to(spawned.group.clone());
    let max_hold = max_hold_timer(cfg, &spawned, log);
    let exit = finish(spawned, || false, cfg, log);
    Ok(if max_hold.is_some_and(StopTimer::stop) {
        Exit::MaxHold
    } else {
        exit
    })
}

fn spawn(cfg: &RunConfig, env: &[(&str, &str)]) -> Result<Spawned, Failure> {
    child::spawn(&cfg.argv, env).map_err(|e| {
        let exit = child::spawn_error_exit(&e);
        Failure {
            exit,
            error: anyhow::Error::new(e)
                .context(format!("cannot run '{}'", cfg.argv[0].to_string_lossy())),
        }
    })
}

/// `--max-hold`: stop COMMAND when it has run for that long.
fn max_hold_timer(cfg: &RunConfig, spawned: &Spawned, log: &Log) -> Option<StopTimer> {
    let limit = cfg.max_hold?;
    let (log, grace) = (*log, cfg.timing.kill_after);
    let announce = move || {
        log.error(format!(
            "COMMAND still runs after --max-hold {}; stopping it (SIGTERM, SIGKILL after {}), exit 124",
            show(limit),
            show(grace)
        ))
    };
    match StopTimer::start(spawned.group.clone(), limit, grace, announce) {
        Ok(timer) => Some(timer),
        Err(e) => {
            // Never let COMMAND run past --max-hold unnoticed.
            log.error(format!(
                "cannot start the --max-hold timer ({e}); stopping COMMAND"
            ));
            spawned.group.signal(Signal::SIGKILL);
            None
        }
    }
}

/// Wait for COMMAND and everything in its group to be gone, then reap it.
/// The lock stays held (and refreshed) all the while.
fn finish(spawned: Spawned, lost: impl Fn() -> bool, cfg: &RunConfig, log: &Log) -> Exit {
    spawned.wait_exit();
    let left = spawned.stop_leftovers(cfg.timing.kill_after);
    // After a loss the group is being stopped anyway: no news.
    if left > 0 && !lost() {
        log.warn(format!(
            "COMMAND exited but left {left} process(es) in its group; stopped them before releasing the lock"
        ));
    }
    spawned.reap()
}

/// `--min-hold`: if COMMAND ended early, keep the lock until `min-hold`
/// after acquiring it, by setting its expiry to the rest. Whether it did.
fn hold_on(
    quorum: &mut Quorum,
    token: &str,
    acquired_at: Instant,
    cfg: &RunConfig,
    log: &Log,
) -> bool {
    let Some(rest) = cfg
        .min_hold
        .and_then(|min| min.checked_sub(acquired_at.elapsed()))
    else {
        return false;
    };
    if rest < Duration::from_millis(1) {
        return false;
    }
    match quorum.extend_for(token, rest) {
        Extend::Extended(_) => {
            log.info(format!(
                "keeping lock '{}' for {} more (--min-hold)",
                cfg.key,
                show(rest)
            ));
            true
        }
        Extend::Lost(_) => {
            log.warn(format!(
                "lock '{}' was already gone at exit; --min-hold cannot keep it",
                cfg.key
            ));
            true
        }
        Extend::Failed(e) => {
            log.warn(format!(
                "cannot keep lock '{}' for --min-hold ({e:#}); releasing it",
                cfg.key
            ));
            false
        }
    }
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
        refresh_ms: u64::try_from(cfg.timing.refresh.as_millis()).unwrap_or(u64::MAX),
        kill_after_ms: u64::try_from(cfg.timing.kill_after.as_millis()).unwrap_or(u64::MAX),
    }
}
