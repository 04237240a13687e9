//! The one blocking wait on a lock's channels, for the waiter
//! (`wait.rs`), `wait KEY` (`admin/wait.rs`) and the refresher
//! (`refresh.rs`): one read of the subscription until the deadline, cut
//! into [`SLICE`]s only where a signal must end it.

use std::time::{Duration, Instant};

use super::channels::Wakeups;

/// How long one read lasts where a signal must end the wait. A signal
/// interrupts the read (it has a timeout, so it is never restarted:
/// signal(7)), so this bounds only how late a signal that came just
/// before the read is noticed; and it is how often an idle waiter wakes
/// (1,000 waiters woke 20,000 times a second with 50 ms slices: 40% of a
/// core).
pub const SLICE: Duration = Duration::from_millis(500);

/// What else ends a wait: a signal, or a request to stop.
pub trait Interrupts {
    /// One that came already, without blocking.
    fn pending(&self) -> Option<i32>;
    /// Sleep up to `d` (there is no subscription to read); one that comes
    /// ends the sleep.
    fn sleep(&self, d: Duration) -> Option<i32>;
    /// Whether one can cut a read short: reads are then [`SLICE`]s. A
    /// thread that blocks signals (the refresher) reads until the
    /// deadline and notices a stop when it wakes.
    fn during_reads(&self) -> bool {
        true
    }
}

/// Why [`listen`] returned.
#[derive(Debug)]
pub enum Heard {
    /// A message on one of the channels, with its payload.
    Message(String),
    /// The deadline came first.
    Deadline,
    /// A signal (its number) or a stop.
    Interrupted(i32),
    /// The subscription broke and was dropped: a message may have been
    /// missed.
    Lost(anyhow::Error),
}

/// Block until `until`, a message on the lock's channels, or an
/// interruption. Without a subscription (none could be made, or it was
/// lost) it sleeps. A subscription that breaks is dropped
/// (`*wakeups = None`) and reported as [`Heard::Lost`].
pub fn listen(
    wakeups: &mut Option<Wakeups>,
    until: Instant,
    interrupts: &impl Interrupts,
) -> Heard {
    loop {
        if let Some(n) = interrupts.pending() {
            return Heard::Interrupted(n);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Heard::Deadline;
        }
        let Some(subscription) = wakeups else {
            return interrupts
                .sleep(left)
                .map_or(Heard::Deadline, Heard::Interrupted);
        };
        let read = match interrupts.during_reads() {
            true => left.min(SLICE),
            false => left,
        };
        match subscription.message(read) {
            Ok(Some(payload)) => return Heard::Message(payload),
            Ok(None) => {}
            Err(e) => {
                *wakeups = None;
                return Heard::Lost(e);
            }
        }
    }
}
