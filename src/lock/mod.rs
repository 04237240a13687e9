//! Redis's only face: everything that talks to Redis or knows how a lock
//! is laid out in it lives under here.
//!
//! - `timing`: the safety arithmetic of a lease (validity, stop margin).
//! - `scripts`: the Lua scripts, with their KEYS/ARGV layout.
//! - `node`: one server: connect with timeouts, run a script, parse it.
//! - `quorum`: N servers (Redlock): majority, validity, fan-out; one
//!   server is a quorum of one.

mod node;
mod quorum;
mod scripts;
pub mod timing;

pub use node::*;
pub use quorum::*;
