//! Taking a run's keys, all or nothing (`-k A -k B`; one key is a set of
//! one, taken exactly as before).
//!
//! The keys are taken one at a time, in one order for every run (sorted,
//! without repeats: `config.rs`), each through the ordinary wait
//! (`wait.rs`: its line, its wake-ups, `--wait` shared by all of them).
//! A run that holds A and waits for B keeps A, refreshed on a thread of
//! its own meanwhile: two runs can never each hold what the other waits
//! for, because both take A before B (no deadlock), and a run that holds
//! its first keys stands in line for the next like any waiter, so it is
//! served in its turn (no starvation; the lines are oldest-first, see
//! `config::several_keys`). Giving the first keys back while waiting
//! would let runs of one key through sooner, but a run of several could
//! then lose the race for its first keys again and again.
//!
//! COMMAND starts only once every key is held. A key that is busy past
//! `--wait`, a signal, a failure: every key taken so far is given back,
//! and COMMAND never starts. A key lost while the run waited for a later
//! one is found when that wait ends: then nothing runs (exit 70).

use std::io::PipeReader;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::RunConfig;
use crate::exit::{Exit, Failure};
use crate::lock::{Lease, Locks, Quorum, Wakeups};
use crate::log::{field, ms, Ev, Log};
use crate::refresh::{Holding, Refresher, SharedLease};
use crate::signals::Signals;
use crate::wait::{self, Patience, Waited};

/// Every key held.
pub struct All {
    pub locks: Locks,
    /// The set's lease: the first key's fence, from when the last key was
    /// taken, until the earliest end of any key's lease.
    pub lease: Lease,
    /// Each key's fence, in the order of `locks`.
    pub fences: Vec<i64>,
    /// The last wait's subscription, closed once COMMAND runs (`run.rs`).
    pub subscription: Option<Wakeups>,
}

/// How taking the keys ended, when it did not fail.
pub enum Got {
    All(All),
    /// Waiting for this key ended without it; nothing is held.
    Not(Waited, String),
}

/// Take every key of `cfg`, in order, on quorums `make` builds.
pub fn acquire(
    make: &impl Fn(&str) -> Quorum,
    cfg: &RunConfig,
    signals: &Signals,
    log: &Log,
    on_wait: &mut dyn FnMut(),
) -> Result<Got, Failure> {
    let started = Instant::now();
    let mut taken = Taken {
        give_up: cfg.wait.map(|w| started + w),
        ..Taken::default()
    };
    for key in &cfg.keys {
        let log = log.for_key(key);
        let mut quorum = make(key);
        let waited = match taken.locks.is_empty() {
            true => first_key(&mut quorum, key, cfg, signals, &log, on_wait),
            false => taken.next_key(&mut quorum, key, cfg, make, signals, &log),
        };
        let waited = waited.inspect_err(|_| taken.give_back(&log))?;
        let (lease, token, subscription) = match waited {
            Waited::Acquired(lease, token, subscription) => (lease, token, subscription),
            // After the first key, Redis has answered this run: its
            // silence now is no reason to run COMMAND without the lock.
            Waited::Unreachable(error) if !taken.locks.is_empty() => {
                taken.give_back(&log);
                return Err(Failure {
                    exit: Exit::Unavailable,
                    error,
                });
            }
            other => {
                taken.give_back(&log);
                return Ok(Got::Not(other, key.clone()));
            }
        };
        tell_acquired(&mut quorum, key, cfg, &log, lease.fence, started.elapsed());
        taken.add(key, quorum, token, lease);
        taken.subscription = subscription;
    }
    taken.all()
}

/// The first key: the ordinary wait, with all of `--wait`.
fn first_key(
    quorum: &mut Quorum,
    key: &str,
    cfg: &RunConfig,
    signals: &Signals,
    log: &Log,
    on_wait: &mut dyn FnMut(),
) -> Result<Waited, Failure> {
    let holder = crate::holder::record(cfg);
    let patience = Patience::of(cfg);
    match cfg.replace_running {
        true => {
            let keys = quorum.lock_keys().clone();
            crate::replace::acquire(quorum, (key, &keys), &holder, patience, signals, log)
        }
        false => wait::acquire(quorum, &holder, patience, key, signals, log, on_wait),
    }
}

/// Say the lock is ours, after what the servers' checks found about it
/// (an evicting maxmemory-policy accepted with --allow-eviction, or a
/// Redlock node left out for it; a policy that could not be read).
fn tell_acquired(
    quorum: &mut Quorum,
    key: &str,
    cfg: &RunConfig,
    log: &Log,
    fence: i64,
    waited: Duration,
) {
    for note in quorum.take_notes() {
        log.emit(Ev::Warning, note, &[field("setting", "maxmemory-policy")]);
    }
    for said in quorum.take_said() {
        let fields = [
            field("server", said.server),
            field("protocol", said.protocol),
        ];
        log.emit(Ev::Protocol, said.message, &fields);
    }
    let (how, mode) = match cfg.shared {
        true => (" shared", "shared"),
        false => ("", "exclusive"),
    };
    log.emit(
        Ev::Acquired,
        format!("acquired lock '{key}'{how} (fence {fence})"),
        &[
            field("fence", fence),
            field("mode", mode),
            ms("wait_ms", waited),
            ms("ttl_ms", cfg.timing.ttl),
            crate::holder::label_of(&cfg.label),
        ],
    );
}

/// The keys taken so far.
#[derive(Default)]
struct Taken {
    locks: Locks,
    fences: Vec<i64>,
    /// The first key's lease, then the set's (see [`All::lease`]).
    lease: Option<Lease>,
    subscription: Option<Wakeups>,
    /// The end of `--wait` for all the keys (`None`: forever).
    give_up: Option<Instant>,
}

impl Taken {
    fn add(&mut self, key: &str, quorum: Quorum, token: String, lease: Lease) {
        self.locks.push(key, quorum, token);
        self.fences.push(lease.fence);
        self.lease = Some(match self.lease {
            None => lease,
            Some(set) => Lease {
                fence: set.fence,
                acquired_at: lease.acquired_at,
                valid_until: set.valid_until.min(lease.valid_until),
                reset: set.reset || lease.reset,
                beside: set.beside.max(lease.beside),
                beside_holder: match set.beside >= lease.beside {
                    true => set.beside_holder,
                    false => lease.beside_holder,
                },
            },
        });
    }

    fn all(self) -> Result<Got, Failure> {
        let lease = self
            .lease
            .ok_or_else(|| Failure::from(anyhow::anyhow!("a run with no key")))?;
        Ok(Got::All(All {
            locks: self.locks,
            lease,
            fences: self.fences,
            subscription: self.subscription,
        }))
    }

    /// A later key: tried once; if it is busy and `--wait` leaves time,
    /// waited for while the keys taken so far are kept alive.
    fn next_key(
        &mut self,
        quorum: &mut Quorum,
        key: &str,
        cfg: &RunConfig,
        make: &impl Fn(&str) -> Quorum,
        signals: &Signals,
        log: &Log,
    ) -> Result<Waited, Failure> {
        let holder = crate::holder::record(cfg);
        let once = Patience {
            wait: Some(Duration::ZERO),
            progress: cfg.progress,
        };
        let tried = wait::acquire(quorum, &holder, once, key, signals, log, &mut || {})?;
        let left = self
            .give_up
            .map(|end| end.saturating_duration_since(Instant::now()));
        if !matches!(tried, Waited::Busy(_)) || left == Some(Duration::ZERO) {
            return Ok(tried);
        }
        let keeping = self.keep(make, cfg, log)?;
        let patience = Patience {
            wait: left,
            progress: cfg.progress,
        };
        let waited = wait::acquire(quorum, &holder, patience, key, signals, log, &mut || {});
        let kept = keeping.stop();
        if let Some(set) = self.lease.as_mut() {
            set.valid_until = kept.valid_until();
        }
        let Some(loss) = kept.loss() else {
            return waited;
        };
        // Not ours any more: the key just taken goes back with the others.
        if let Ok(Waited::Acquired(_, token, _)) = &waited {
            quorum.release(token, 3);
        }
        let lost = self.name();
        Err(Failure {
            exit: Exit::LockLost,
            error: anyhow::anyhow!(
                "lock '{lost}' {} while this run waited for lock '{key}'; COMMAND did not run",
                loss.why()
            ),
        })
    }

    /// The keys taken so far, as one name (the refresher says which one
    /// was lost, when there are several).
    fn name(&self) -> String {
        self.locks.keys().collect::<Vec<_>>().join(" + ")
    }

    /// Refresh the keys taken so far on a thread of their own, until
    /// [`Keeping::stop`].
    fn keep(
        &self,
        make: &impl Fn(&str) -> Quorum,
        cfg: &RunConfig,
        log: &Log,
    ) -> Result<Keeping, Failure> {
        let local = |e: std::io::Error| Failure {
            exit: Exit::LocalFailure,
            error: anyhow::Error::new(e).context(
                "cannot start refreshing the keys held while waiting; COMMAND did not run",
            ),
        };
        let (wake, woken) = crate::refresh::wake_pipe().map_err(local)?;
        let until = self.lease.map_or_else(Instant::now, |l| l.valid_until);
        let lease = SharedLease::new(until, wake);
        let key = self.name();
        let holding = Holding {
            log: log.for_key(&key),
            key,
        };
        let fresh = self.locks.fresh(make);
        let refresher =
            Refresher::start(fresh, holding, Arc::clone(&lease), cfg.timing).map_err(local)?;
        Ok(Keeping {
            refresher,
            lease,
            _woken: woken,
        })
    }

    /// Give back every key taken (a later one was not had, or failed).
    fn give_back(&mut self, log: &Log) {
        for done in self.locks.release(3) {
            let key = done.key;
            let log = log.for_key(key);
            for e in done.released.errors {
                log.emit(
                    Ev::ReleaseFailed,
                    format!("could not release lock '{key}' ({e:#}); its TTL will clean up"),
                    &[field("error", format!("{e:#}"))],
                );
            }
            if done.released.ours > 0 {
                log.emit(Ev::Released, format!("released lock '{key}'"), &[]);
            }
        }
        self.locks = Locks::default();
    }
}

/// The keys taken so far, refreshed while the run waits for the next.
struct Keeping {
    refresher: Refresher,
    lease: Arc<SharedLease>,
    /// The read end of the refresher's wake-up pipe: nobody reads it
    /// (nothing runs yet), but it lives while the refresher may write.
    _woken: PipeReader,
}

impl Keeping {
    /// Stop refreshing: the lease as last confirmed, and any loss found.
    fn stop(self) -> Arc<SharedLease> {
        self.refresher.stop();
        self.lease
    }
}

/// Inside COMMAND of another run: which of our keys it holds.
pub enum Outer {
    /// None of them (or it holds none any more): an ordinary run.
    Ordinary,
    /// Every one: run COMMAND at once under it.
    Nested,
}

/// Whether the run we are nested in (its `REDLOCK_KEYS` and
/// `REDLOCK_TOKENS`, or `REDLOCK_KEY` and `REDLOCK_TOKEN` from a version
/// that knew one key) holds our keys, as `holds(key, token)` finds in
/// Redis. Some but not all is refused (exit 2): the run would wait for
/// itself.
pub fn outer(cfg: &RunConfig, mut holds: impl FnMut(&str, &str) -> bool) -> Result<Outer, Failure> {
    let tokens = outer_tokens();
    if tokens.is_empty() {
        return Ok(Outer::Ordinary);
    }
    let (inside, outside): (Vec<&String>, Vec<&String>) = cfg.keys.iter().partition(|key| {
        let token = tokens.iter().find(|(k, _)| k == *key).map(|(_, t)| t);
        token.is_some_and(|t| holds(key, t))
    });
    match (inside.is_empty(), outside.is_empty()) {
        (true, _) => Ok(Outer::Ordinary),
        (false, true) => Ok(Outer::Nested),
        (false, false) => Err(Failure {
            exit: Exit::Usage,
            error: anyhow::anyhow!(
                "{} held by the run this one is nested in, {} not: a nested run takes all of \
                 its keys from the outer run or none (it would wait for itself)",
                quoted(&inside),
                quoted(&outside)
            ),
        }),
    }
}

/// `lock 'a'`, `locks 'a', 'b'`.
fn quoted(keys: &[&String]) -> String {
    let list: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
    match list.len() {
        1 => format!("lock {} is", list.join("")),
        _ => format!("locks {} are", list.join(", ")),
    }
}

/// The outer run's keys and tokens, from our environment.
fn outer_tokens() -> Vec<(String, String)> {
    let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
    let pairs: Vec<(String, String)> = match (var("REDLOCK_KEYS"), var("REDLOCK_TOKENS")) {
        (Some(keys), Some(tokens)) => pair_lines(&keys, &tokens),
        _ => match (var("REDLOCK_KEY"), var("REDLOCK_TOKEN")) {
            (Some(key), Some(token)) => vec![(key, token)],
            _ => Vec::new(),
        },
    };
    pairs.into_iter().filter(|(_, t)| !t.is_empty()).collect()
}

/// Lines of `keys` with the lines of `tokens`, when they match up.
fn pair_lines(keys: &str, tokens: &str) -> Vec<(String, String)> {
    let keys: Vec<&str> = keys.lines().collect();
    let tokens: Vec<&str> = tokens.lines().collect();
    if keys.len() != tokens.len() {
        return Vec::new();
    }
    keys.into_iter()
        .zip(tokens)
        .map(|(k, t)| (k.to_string(), t.to_string()))
        .collect()
}

/// The variables COMMAND gets: `REDLOCK_KEY`, `REDLOCK_TOKEN` and
/// `REDLOCK_FENCE` for the first key (in sorted order), and
/// `REDLOCK_KEYS`, `REDLOCK_TOKENS` and `REDLOCK_FENCES` with one line
/// per key, in the same order (a key has no control characters, so a
/// line is a key). `tokens` and `fences` empty: COMMAND runs unlocked.
pub fn env_of(keys: &[String], tokens: &[&str], fences: &[i64]) -> Vec<(&'static str, String)> {
    let fences: Vec<String> = fences.iter().map(i64::to_string).collect();
    let first = |all: &[String]| all.first().cloned().unwrap_or_default();
    let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    vec![
        ("REDLOCK_KEY", first(keys)),
        ("REDLOCK_TOKEN", first(&tokens)),
        ("REDLOCK_FENCE", first(&fences)),
        ("REDLOCK_KEYS", keys.join("\n")),
        ("REDLOCK_TOKENS", tokens.join("\n")),
        ("REDLOCK_FENCES", fences.join("\n")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outer_runs_keys_pair_with_its_tokens_line_by_line() {
        assert_eq!(
            pair_lines("a\nb c", "t1\nt2"),
            vec![("a".into(), "t1".into()), ("b c".into(), "t2".into())]
        );
        // Lines that do not match up name nothing.
        assert!(pair_lines("a\nb", "t1").is_empty());
    }

    #[test]
    fn the_first_key_has_the_singular_variables() {
        let keys = vec!["a".to_string(), "b".to_string()];
        let env = env_of(&keys, &["t1", "t2"], &[7, 9]);
        let get = |name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("REDLOCK_KEY"), Some("a"));
        assert_eq!(get("REDLOCK_TOKEN"), Some("t1"));
        assert_eq!(get("REDLOCK_FENCE"), Some("7"));
        assert_eq!(get("REDLOCK_KEYS"), Some("a\nb"));
        assert_eq!(get("REDLOCK_FENCES"), Some("7\n9"));
        // Unlocked: the keys, and no token or fence.
        let env = env_of(&keys, &[], &[]);
        let get = |name| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("REDLOCK_TOKEN"), Some(""));
        assert_eq!(get("REDLOCK_FENCES"), Some(""));
    }
}
