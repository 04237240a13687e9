//! Lines on stderr, prefixed `redlock-run:`, filtered by `-q`/`-v`, and
//! scrubbed of passwords whatever their origin.

use std::io::Write;

use crate::config::{scrub, Verbosity};

#[derive(Debug, Clone, Copy)]
pub struct Log {
    verbosity: Verbosity,
}

impl Log {
    pub fn new(verbosity: Verbosity) -> Log {
        Log { verbosity }
    }

    /// Lock events, shown with `-v`.
    pub fn info(&self, message: impl AsRef<str>) {
        if self.verbosity >= Verbosity::Verbose {
            line(message.as_ref());
        }
    }

    /// Things a user should know (who holds a busy lock), hidden by `-q`.
    pub fn warn(&self, message: impl AsRef<str>) {
        if self.verbosity >= Verbosity::Normal {
            line(message.as_ref());
        }
    }

    /// Always shown.
    pub fn error(&self, message: impl AsRef<str>) {
        line(message.as_ref());
    }
}

fn line(message: &str) {
    // Not eprintln!: it panics when stderr is a closed pipe (`2>&1 | head`),
    // and redlock-run must not die while it holds a lock over a job.
    let _ = writeln!(std::io::stderr(), "redlock-run: {}", scrub(message));
}
