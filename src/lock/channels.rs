//! Wake-ups: the messages on a lock's channels, read from a connection
//! subscribed to them (see `Node::subscribe`).

use std::time::Duration;

use redis::Connection;

use super::error::describe;

/// Wake-ups from a lock's channels, on a connection of their own: the
/// lock's connection stays free for commands.
pub struct Wakeups {
    conn: Connection,
    /// The per-node timeout: how long a message may take to come whole
    /// once the wait for one is over.
    timeout: Duration,
    /// Where the wake-ups come from, boxed: a waiter's answer carries
    /// its `Wakeups` (see `wait::Waited`).
    source: Box<Source>,
}

struct Source {
    /// The `run_id` of the server subscribed on, behind sentinels and on
    /// a Cluster (see `Node::subscribe`).
    at: Option<Box<str>>,
    /// The lock's key (`LockKeys::lock`): a wake-up may name its line's
    /// keys (see `calls::heard`).
    lock: Box<str>,
}

impl Wakeups {
    pub(super) fn new(
        conn: Connection,
        timeout: Duration,
        at: Option<Box<str>>,
        lock: &str,
    ) -> Wakeups {
        let lock = lock.into();
        Wakeups {
            conn,
            timeout,
            source: Box::new(Source { at, lock }),
        }
    }

    /// The `run_id` of the server these wake-ups come from, where the
    /// lock's keys may move to another server (Sentinel, Cluster).
    pub fn at(&self) -> Option<&str> {
        self.source.at.as_deref()
    }

    /// Block up to `d` (not zero) for a message: `Ok(Some(payload))` if one
    /// came (empty if not text), `Ok(None)` on timeout or a signal, an
    /// error if the connection broke. See `wakeups::listen`.
    pub fn message(&mut self, d: Duration) -> anyhow::Result<Option<String>> {
        let mut pubsub = self.conn.as_pubsub();
        // Each read waits up to `d`; a message trickled a byte at a time
        // must not hold us longer than that and the per-node timeout.
        let armed = super::deadline::Armed::new(d.saturating_add(self.timeout));
        let got = pubsub
            .set_read_timeout(Some(d))
            .and_then(|()| pubsub.get_message());
        let overrun = armed.disarm();
        // Dropping a PubSub unsubscribes: a round trip that could block on a
        // dead server. The subscription ends with the connection instead.
        // Nothing leaks: its queue only fills while a command awaits a reply.
        std::mem::forget(pubsub);
        match got {
            Ok(msg) => {
                let payload = msg.get_payload::<String>().unwrap_or_default();
                Ok(Some(super::calls::heard(&self.source.lock, payload)))
            }
            // Cut in the middle of a message: the connection is no use.
            Err(_) if overrun => Err(describe(super::deadline::overrun(d + self.timeout))),
            Err(e) if e.is_timeout() => Ok(None),
            // A signal: a read with a timeout is never restarted (signal(7)),
            // which is what lets the caller notice it at once.
            Err(e) if e.is_io_error() && e.to_string().contains("os error 4)") => Ok(None),
            Err(e) => Err(describe(e)),
        }
    }
}
