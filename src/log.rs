//! Lines on stderr, prefixed `redlock-run:`, filtered by `-q`/`-v`, and
//! scrubbed of passwords whatever their origin.

use std::io::Write;
use std::time::Duration;

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

/// A duration for messages, rounded to milliseconds ("333ms", "1s 500ms").
pub fn show(d: Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// A duration for humans: "350ms" below a second, else whole seconds
/// ("12s", "1h 2m 5s").
pub fn short(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_milliseconds() {
        assert_eq!(show(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(show(Duration::from_micros(333_400)), "333ms");
    }

    #[test]
    fn durations_read_short() {
        assert_eq!(short(Duration::from_millis(350)), "350ms");
        assert_eq!(short(Duration::from_millis(12_900)), "12s");
        assert_eq!(short(Duration::from_secs(3725)), "1h 2m 5s");
    }
}
