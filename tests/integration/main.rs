//! The integration tests: one binary (so the harness in `common/` is
//! compiled once), a module per area of the contract. Every test starts
//! its own redis-server processes on free loopback ports.

mod common;

mod acl;
mod admin;
mod auth;
mod chaos;
mod cluster;
mod faults;
mod fleet;
mod generated;
mod harness;
mod limit;
mod lock_safety;
mod metrics_file;
mod nested;
mod observe;
mod promise;
mod readme;
mod redlock;
mod run;
mod scripts;
mod sentinel;
mod tls;
mod topology_harness;
mod tree;
mod wait;
