//! The refresher: a thread that keeps the lock alive while COMMAND runs,
//! and stops COMMAND when the lock can no longer be shown to be ours.
//!
//! It keeps a deadline from our own monotonic clock: the lock is valid
//! until the last confirmed refresh (its send time) + TTL − drift. If no
//! refresh is confirmed in time, COMMAND gets SIGTERM early enough that
//! SIGKILL after `--kill-after` still lands before that deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use nix::sys::signal::Signal;

use crate::child::ChildGroup;
use crate::lock::timing::Timing;
use crate::lock::{Extend, Lease, Quorum};
use crate::log::Log;

/// Why the lock was lost.
#[derive(Debug)]
pub enum Loss {
    /// Another token holds it.
    Replaced,
    /// It expired or was deleted.
    Gone,
    /// No refresh was confirmed before the deadline.
    Unconfirmed(Option<anyhow::Error>),
}

pub struct Refresher {
    stop: Sender<()>,
    lost: Arc<AtomicBool>,
    handle: JoinHandle<(Quorum, Option<Loss>)>,
}

impl Refresher {
    /// Start refreshing `lease` for `token`; stop `group` if it is lost.
    pub fn start(
        mut quorum: Quorum,
        token: String,
        lease: Lease,
        plan: Timing,
        group: Arc<ChildGroup>,
        log: Log,
        key: String,
    ) -> std::io::Result<Refresher> {
        let (stop, stopped) = mpsc::channel::<()>();
        let lost = Arc::new(AtomicBool::new(false));
        let lost_flag = Arc::clone(&lost);
        let handle = std::thread::Builder::new().name("refresh".into()).spawn(move || {
            // `recv_timeout` is both the timer and the stop signal.
            let sleep = |until: Instant| match stopped.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => false,
                Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
            };
            let mut valid_until = lease.valid_until;
            let mut next = Instant::now() + plan.refresh;
            let mut last_error = None;
            let loss = loop {
                let term_at = plan.term_at(valid_until);
                if sleep(next.min(term_at)) {
                    return (quorum, None);
                }
                let now = Instant::now();
                if now >= term_at {
                    break Loss::Unconfirmed(last_error);
                }
                if now < next {
                    continue;
                }
                match quorum.extend(&token) {
                    Extend::Extended(until) => {
                        valid_until = until;
                        next = now + plan.refresh;
                        last_error = None;
                        log.info(format!("refreshed lock '{key}'"));
                    }
                    Extend::Lost(crate::lock::Ownership::Replaced) => break Loss::Replaced,
                    Extend::Lost(_) => break Loss::Gone,
                    Extend::Failed(e) => {
                        log.info(format!("refresh of lock '{key}' failed, retrying: {e:#}"));
                        last_error = Some(e);
                        next = Instant::now() + plan.retry_every();
                    }
                }
            };
            lost_flag.store(true, Ordering::SeqCst);
            let grace = crate::log::show(plan.kill_after);
            let why = match &loss {
                Loss::Replaced => "was taken over by another holder".to_string(),
                Loss::Gone => "expired or was deleted".to_string(),
                Loss::Unconfirmed(Some(e)) => format!("could not be refreshed before it could expire ({e:#})"),
                Loss::Unconfirmed(None) => "could not be refreshed before it could expire".to_string(),
            };
            log.error(format!(
                "lock '{key}' lost: it {why}; stopping COMMAND (SIGTERM, SIGKILL after {grace}), exit 70"
            ));
            group.signal(Signal::SIGTERM);
            group.signal(Signal::SIGCONT);
            if !sleep(Instant::now() + plan.kill_after) {
                group.signal(Signal::SIGKILL);
                let _ = stopped.recv();
            }
            (quorum, Some(loss))
        })?;
        Ok(Refresher { stop, lost, handle })
    }

    /// Whether the lock has been lost (COMMAND is being stopped).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stop refreshing; give back the nodes and say whether the lock was lost.
    pub fn stop(self) -> (Quorum, Option<Loss>) {
        let _ = self.stop.send(());
        self.handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}
