//! Redis's only face: everything that talks to Redis or knows how a lock
//! is laid out in it lives under here. Nothing outside names a `redis::`
//! type.
//!
//! - `endpoint`: one server as the user named it (URL, TLS files).
//! - `keys`: the Redis keys of a lock and the holder record.
//! - `scripts`: the Lua scripts.
//! - `calls`: each script's KEYS and ARGV, built from named fields.
//! - `reply`: the scripts' replies as types.
//! - `deadline`: one deadline per exchange (a server that trickles
//!   its reply cannot hold a command past it).
//! - `dial`: making a connection within a deadline, name resolution
//!   included.
//! - `error`: a node's errors by kind.
//! - `node`: one connection: connect, query, eval, subscribe; a call in
//!   two halves (send, then read) for a round.
//! - `info`: what an `INFO` reply says (`run_id`, eviction settings).
//! - `channels`: wake-ups, the messages on a lock's channels.
//! - `kind`: a plain lock, a shared lock or a semaphore, and the scripts
//!   each one uses.
//! - `inspect`: reading and deleting locks by hand.
//! - `line`: reading the line of waiters, for `status` and `list`.
//! - `sentinel`: finding the master of a Sentinel service.
//! - `cluster`: a Redis Cluster: routing, its primaries.
//! - `fanout`: N servers at once: one round sends to every node, then
//!   reads every answer, within one deadline; no thread per call.
//! - `decide`: the lock's decisions as pure functions (answers in,
//!   outcome out), and which error decides (local > refused > moving >
//!   unavailable).
//! - `outcome`: what the lock's calls come to (a lease, an attempt).
//! - `quorum`: the lock over its nodes: attempts, refreshes, releases;
//!   one server is a quorum of one.
//! - `multi`: the locks a run holds, one quorum per key (`-k A -k B`),
//!   refreshed and released together; one key is a set of one.
//! - `redlock`: what only several masters need (one server under two
//!   names refused, fence raise, which nodes granted us the lock); a
//!   one-node lock never enters it.
//! - `replicas`: `--replicas`: WAIT, and what a short WAIT means.
//! - `timing`: the safety arithmetic of a lease (validity, stop margin).
//! - `wakeups`: the one blocking wait on a lock's channels.
//! - `wire`: a script's EVAL as sent: by its digest (EVALSHA), its text
//!   only to a server that lacks it.
//! - `scriptless`: where EVAL is denied or absent, each script's call
//!   read back into its step, or refused (a pure decision).
//! - `txn`: those steps made with WATCH/MULTI/EXEC and `SET ... IFEQ`,
//!   answered as the scripts answer.
//! - `probe`: raw commands to each server an endpoint names, for `doctor`.

mod calls;
mod channels;
mod cluster;
mod deadline;
mod decide;
mod dial;
mod endpoint;
mod error;
mod fanout;
mod info;
mod inspect;
mod keys;
mod kind;
mod line;
mod multi;
mod node;
mod outcome;
pub mod probe;
pub mod protocol;
mod quorum;
mod redlock;
mod replicas;
mod reply;
mod scriptless;
mod scripts;
mod sentinel;
pub mod timing;
mod txn;
mod wakeups;
mod wire;

pub use channels::Wakeups;
pub use decide::Verdict;
pub use endpoint::{distinct, endpoint, with_password, with_tls, Endpoint, TlsFiles};
pub use error::{join_node_errors, Fault, NodeError};
pub use fanout::{sent_or_now, while_sent};
pub use keys::{prefix_fits_cluster, Holder, LockKeys};
pub use line::{Line, Waiting};
pub use multi::{KeyReleased, Locks};
pub use quorum::*;
pub use replicas::acknowledging;
pub use replicas::Replicas;
pub use reply::{BusyInfo, Forced, Inspected, Ownership, Place, Slot, SlotsTaken};
pub use wakeups::{listen, Heard, Interrupts};
