//! Shared integration-test harness: throwaway redis-server instances and helpers
//! for running the `redlock-run` binary. Use as `mod common; use common::*;`.
#![allow(dead_code)]

mod run;
mod server;

pub use run::*;
pub use server::*;
