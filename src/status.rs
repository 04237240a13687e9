//! status, list and force-release.

use anyhow::anyhow;

use crate::cli::Cmd;
use crate::config::Conn;
use crate::exit::{Exit, Failure};

pub fn run(_conn: Conn, _cmd: Cmd) -> Result<Exit, Failure> {
    Err(Failure {
        exit: Exit::Usage,
        error: anyhow!("not implemented yet"),
    })
}
