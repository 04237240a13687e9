//! Signals received by redlock-run: SIGINT, SIGTERM, SIGHUP, SIGQUIT,
//! SIGUSR1 and SIGUSR2.
//!
//! Before COMMAND runs they are queued for the main thread (waiting for a
//! busy lock stops at once). Once COMMAND runs they are passed to its
//! process group as the same signal; the lock stays held until it exits.

use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::Signals;

use crate::child::ChildGroup;

pub const HANDLED: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

pub struct SignalRelay {
    queued: Receiver<i32>,
    /// Where signals go once COMMAND runs. The signal thread decides
    /// "queue or forward" under this lock, so none falls between the two.
    target: Arc<Mutex<Option<Arc<ChildGroup>>>>,
}

impl SignalRelay {
    /// Catch the signals, on a thread of their own.
    pub fn start() -> std::io::Result<SignalRelay> {
        let mut signals = Signals::new(HANDLED)?;
        let (tx, queued) = mpsc::channel();
        let target: Arc<Mutex<Option<Arc<ChildGroup>>>> = Arc::default();
        let forward_to = Arc::clone(&target);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    let group = forward_to.lock().unwrap_or_else(PoisonError::into_inner);
                    match (group.as_ref(), Signal::try_from(sig)) {
                        (Some(group), Ok(sig)) => group.signal(sig),
                        _ => {
                            let _ = tx.send(sig);
                        }
                    }
                }
            })?;
        Ok(SignalRelay { queued, target })
    }

    /// Sleep for up to `d`; a signal ends the sleep and is returned.
    pub fn sleep(&self, d: Duration) -> Option<i32> {
        self.queued.recv_timeout(d).ok()
    }

    /// A signal received and not yet handled, if any.
    pub fn pending(&self) -> Option<i32> {
        self.queued.try_recv().ok()
    }

    /// From now on pass every signal to `group`, including any that arrived
    /// while COMMAND was being started.
    pub fn forward_to(&self, group: Arc<ChildGroup>) {
        let mut target = self.target.lock().unwrap_or_else(PoisonError::into_inner);
        *target = Some(Arc::clone(&group));
        while let Ok(sig) = self.queued.try_recv() {
            if let Ok(sig) = Signal::try_from(sig) {
                group.signal(sig);
            }
        }
    }
}
