//! Waiting for a busy lock: retry with jitter until `--wait` runs out,
//! a signal arrives, or the lock is ours.

use std::time::{Duration, Instant, SystemTime};

use crate::exit::{Exit, Failure};
use crate::lock::{BusyInfo, Holder};
use crate::log::Log;
use crate::redlock::{Attempt, Lease, Quorum};
use crate::signals::SignalRelay;

/// How waiting ended, when it did not fail.
pub enum Waited {
    Acquired(Lease),
    /// Still busy when `--wait` ran out.
    Busy(BusyInfo),
    /// A signal arrived first; nothing is left in Redis.
    Signaled(i32),
}

/// Retry delays: short enough for a prompt hand-over, jittered so that
/// waiters do not retry in lock-step.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_millis(120);

/// Try to take the lock, waiting up to `wait` (`None`: forever).
pub fn acquire(
    quorum: &mut Quorum,
    token: &str,
    holder: &Holder,
    wait: Option<Duration>,
    key: &str,
    signals: &SignalRelay,
    log: &Log,
) -> Result<Waited, Failure> {
    let give_up = wait.map(|w| Instant::now() + w);
    let mut announced = false;
    loop {
        let info = match quorum.try_acquire(token, holder) {
            Attempt::Acquired(lease) => return Ok(Waited::Acquired(lease)),
            Attempt::Unavailable(error) => {
                return Err(Failure {
                    exit: Exit::Unavailable,
                    error: error.context(format!("cannot take lock '{key}': Redis unavailable")),
                })
            }
            Attempt::Busy(info) => info,
        };
        let now = Instant::now();
        if give_up.is_some_and(|end| now >= end) {
            return Ok(Waited::Busy(info));
        }
        if !announced {
            log.info(format!("lock '{key}' {}; waiting", describe_holder(&info)));
            announced = true;
        }
        let mut delay = jitter(RETRY_MIN, RETRY_MAX);
        if info.pttl_ms > 0 {
            // Do not sleep past the holder's expiry.
            delay = delay.min(Duration::from_millis(info.pttl_ms as u64 + 1));
        }
        if let Some(end) = give_up {
            delay = delay.min(end - now);
        }
        if let Some(sig) = signals.sleep(delay) {
            return Ok(Waited::Signaled(sig));
        }
    }
}

/// "is held by host web1 pid 4242 for 12s (expires in 18s)".
pub fn describe_holder(info: &BusyInfo) -> String {
    let mut text = String::from("is held");
    if !info.host.is_empty() {
        text += &format!(" by host {} pid {}", info.host, info.pid);
    }
    if let Ok(since) = humantime::parse_rfc3339_weak(&info.acquired_at) {
        let age = SystemTime::now().duration_since(since).unwrap_or_default();
        text += &format!(
            " for {}",
            humantime::format_duration(Duration::from_secs(age.as_secs()))
        );
    }
    if info.pttl_ms >= 0 {
        let left = Duration::from_millis(info.pttl_ms as u64 / 100 * 100);
        text += &format!(" (expires in {})", crate::config::show(left));
    }
    text
}

/// A uniformly random duration in `[low, high)`.
pub fn jitter(low: Duration, high: Duration) -> Duration {
    let span = (high - low).as_micros().max(1) as u64;
    let random = uuid::Uuid::new_v4().as_u64_pair().0;
    low + Duration::from_micros(random % span)
}
