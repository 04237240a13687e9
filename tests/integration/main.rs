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
mod fleet;
mod flock;
mod generated;
mod handover;
mod harness;
mod hold;
mod host_faults;
mod input;
mod job_control;
mod job_tree;
mod keeper;
mod layout;
mod limit;
mod lock_loss;
mod metrics_file;
mod monitoring;
mod multikey;
mod nested;
mod observe;
mod prefork;
mod protocols;
mod queue;
mod readme;
mod redlock;
mod replace;
mod run;
mod scripts;
mod sentinel;
mod servers;
mod shared;
mod signals;
mod tls;
mod topology_harness;
mod trickle;
mod wait_key;
mod waiting;
mod warn;
