//! redlock-run's own lines on stderr: every one is an [`Event`] with a
//! stable name, a level, a message and typed fields, written as text
//! (`redlock-run: message`, today's wording) or as one JSON object per
//! line (`--log-format json`). This is the one place that turns an event
//! into either form; `-q` keeps errors only and `-v` adds the info events
//! (but for the few said without it, see [`Ev::said_by_default`]).
//! Passwords are scrubbed from every field. Lines go through a writer
//! thread with a bounded queue (see `writer.rs`), so a stalled stderr
//! never blocks the caller.

mod events;
mod writer;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

pub use events::Ev;

use crate::secrets::scrub;

/// How much to print on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `redlock-run: message`.
    Text,
    /// One JSON object per line.
    Json,
}

/// How much an event matters: errors always show, warnings unless `-q`,
/// info only with `-v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
        }
    }
}

/// A typed field of an event.
pub type Field = (&'static str, Value);

/// Where events go: cheap to clone, shared by every thread of a run.
#[derive(Debug, Clone)]
pub struct Log {
    inner: Arc<Settings>,
}

#[derive(Debug)]
struct Settings {
    verbosity: Verbosity,
    format: Format,
    /// The lock's KEY, in every JSON line (none for admin commands).
    key: Option<String>,
}

impl Log {
    pub fn new(verbosity: Verbosity, format: Format) -> Log {
        Log {
            inner: Arc::new(Settings {
                verbosity,
                format,
                key: None,
            }),
        }
    }

    /// The same log, naming `key` in every JSON line.
    pub fn for_key(&self, key: &str) -> Log {
        Log {
            inner: Arc::new(Settings {
                key: Some(key.to_string()),
                ..*self.inner
            }),
        }
    }

    /// Whether events of `level` are written at all (to skip building
    /// messages that would be thrown away).
    pub fn shows(&self, level: Level) -> bool {
        let needed = match level {
            Level::Error => Verbosity::Quiet,
            Level::Warn => Verbosity::Normal,
            Level::Info => Verbosity::Verbose,
        };
        self.inner.verbosity >= needed
    }

    /// Write one event, if its level is shown (or it is one of the info
    /// events said without `-v`, and `-q` was not given).
    pub fn emit(&self, ev: Ev, message: impl AsRef<str>, fields: &[Field]) {
        let level = ev.level();
        let by_default = ev.said_by_default() && self.inner.verbosity >= Verbosity::Normal;
        if !self.shows(level) && !by_default {
            return;
        }
        if self.inner.format == Format::Text && told_by_the_next(ev, fields) {
            return;
        }
        let message = scrub(message.as_ref());
        let line = match self.inner.format {
            Format::Text => format!("redlock-run: {message}\n"),
            Format::Json => self.json(ev, level, &message, fields),
        };
        writer::write(line.into_bytes());
    }

    /// One JSON object: `ts`, `level`, `event`, `key`, `msg`, then the
    /// event's fields, in that order.
    fn json(&self, ev: Ev, level: Level, message: &str, fields: &[Field]) -> String {
        let ts = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let mut line = format!(
            "{{\"ts\":{},\"level\":{},\"event\":{}",
            quote(&ts),
            quote(level.name()),
            quote(ev.name())
        );
        if let Some(key) = &self.inner.key {
            line += &format!(",\"key\":{}", quote(key));
        }
        line += &format!(",\"msg\":{}", quote(message));
        for (name, value) in fields.iter().filter(|(_, v)| !v.is_null()) {
            let value = match value {
                Value::String(s) => Value::String(scrub(s)),
                other => other.clone(),
            };
            line += &format!(",{}:{}", quote(name), value);
        }
        line + "}\n"
    }

    /// An error line, whatever the verbosity (a catch-all event).
    pub fn error(&self, message: impl AsRef<str>) {
        self.emit(Ev::Error, message, &[]);
    }

    /// A warning (a catch-all event), hidden by `-q`.
    pub fn warn(&self, message: impl AsRef<str>) {
        self.emit(Ev::Warning, message, &[]);
    }

    /// A note, shown with `-v` (a catch-all event).
    pub fn info(&self, message: impl AsRef<str>) {
        self.emit(Ev::Note, message, &[]);
    }
}

/// Whether a text line for this event would tell again what the next
/// line tells: the stop of a lost lock (sent first: signal first, talk
/// later) is said by the `lost` line that follows it ("lock 'K' lost:
/// ...; stopping COMMAND (SIGTERM, SIGKILL after 5s), exit 70"). JSON
/// keeps both events, in the order they happened.
fn told_by_the_next(ev: Ev, fields: &[Field]) -> bool {
    use crate::plan::Loss;
    let losses = [
        Loss::Replaced,
        Loss::Gone,
        Loss::Revoked,
        Loss::Superseded,
        Loss::Unconfirmed,
        Loss::Suspended,
    ];
    ev == Ev::Stopping
        && fields.iter().any(|(name, value)| {
            *name == "reason" && losses.iter().any(|l| value.as_str() == Some(l.name()))
        })
}

/// Wait (boundedly) for the queued lines to reach stderr: at exit.
pub fn flush() {
    writer::flush(Duration::from_secs(2));
}

/// Text for stderr as it is (clap's usage errors), through the same queue.
pub fn raw(text: String) {
    writer::write(text.into_bytes());
}

/// Write `text` to stdout. A closed pipe (`status | head`) is not an
/// error: the reader has all it wanted.
pub fn to_stdout(text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A field: `field("fence", 42)`.
pub fn field(name: &'static str, value: impl Into<Value>) -> Field {
    (name, value.into())
}

/// Milliseconds as a JSON integer field.
pub fn ms(name: &'static str, d: Duration) -> Field {
    (
        name,
        Value::from(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
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
