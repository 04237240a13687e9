//! Shared integration-test harness: throwaway redis-server instances and helpers
//! for running the `redlock-run` binary. Use as `mod common; use common::*;`.
#![allow(dead_code)]

mod docs;
mod run;
mod server;

// Not every test binary uses both halves.
#[allow(unused_imports)]
pub use docs::*;
#[allow(unused_imports)]
pub use run::*;
#[allow(unused_imports)]
pub use server::*;
