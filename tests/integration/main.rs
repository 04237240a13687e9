//! The integration tests: one binary (so the harness in `common/` is
//! compiled once), a module per area of the contract. Every test starts
//! its own redis-server processes on free loopback ports.

mod common;

mod acl;
mod admin;
mod auth;
mod chaos;
mod ci;
mod cluster;
mod cron;
mod declared_keys;
mod doctor;
mod eviction;
mod faults;
mod fleet;
mod flock;
mod generated;
mod harness;
mod input;
mod keeper;
mod layout;
mod limit;
mod local_faults;
mod lock_safety;
mod metrics_file;
mod monitoring;
mod nested;
mod observe;
mod promise;
mod queue;
mod readme;
mod redlock;
mod run;
mod scripts;
mod sentinel;
mod tls;
mod topology_harness;
mod tree;
mod trickle;
mod wait;
mod warn;
