//! Shared integration-test harness: throwaway redis-server instances and
//! helpers for running the `redlock-run` binary.

mod contention;
mod docs;
mod job;
mod loss;
mod net;
mod prom;
mod proxy;
mod run;
mod server;
mod times;
mod tmux;
mod tools;
mod topology;

pub use contention::*;
pub use docs::*;
pub use job::*;
pub use loss::*;
pub use net::*;
pub use prom::*;
pub use proxy::*;
pub use run::*;
pub use server::*;
pub use times::*;
pub use tmux::*;
pub use tools::*;
pub use topology::*;
