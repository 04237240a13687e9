//! redlock-run: run a command while holding a Redis distributed lock.

mod child;
mod cli;
mod config;
mod docs;
mod exit;
mod lock;
mod log;
mod refresh;
mod run;
mod secrets;
mod signals;
mod status;
mod wait;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Cmd};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Needs no Redis, so a bad REDIS_URL must not stop it.
    if let Some(Cmd::Generate { what }) = cli.cmd {
        return docs::print(what);
    }
    let conn = config::conn(&cli.conn).unwrap_or_else(|e| e.exit());
    let result = match cli.cmd {
        None => {
            let cfg = config::run(cli.run, &conn).unwrap_or_else(|e| e.exit());
            run::run(conn, cfg)
        }
        Some(cmd) => status::run(conn, cmd),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(failure) => {
            log::Log::new(config::Verbosity::Quiet).error(failure.to_string());
            failure.exit.into()
        }
    }
}
