//! A lock's holder: the record a run writes when it takes a lock, and the
//! one way every message shows a holder ("web1 pid 4242 (root) for 12s,
//! expires in 18s, fence 42: pg_dump"), whether `status` read it or a
//! busy answer carried it.

use std::time::{Duration, SystemTime};

use crate::config::RunConfig;
use crate::lock::{BusyInfo, Holder, SlotsTaken};
use crate::log::short;
use crate::secrets::untrusted;

/// The holder record of this run: who we are and what we run.
pub fn record(cfg: &RunConfig) -> Holder {
    let host = host();
    let mut command = recorded(&cfg.display);
    if command.len() > 1000 {
        let cut = (0..=1000)
            .rev()
            .find(|&i| command.is_char_boundary(i))
            .unwrap_or(0);
        command.truncate(cut);
        command.push('…');
    }
    Holder {
        host,
        pid: std::process::id(),
        user: user(),
        command,
        acquired_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        label: cfg.label.clone(),
        refresh_ms: u64::try_from(cfg.timing.refresh.as_millis()).unwrap_or(u64::MAX),
        kill_after_ms: u64::try_from(cfg.timing.kill_after.as_millis()).unwrap_or(u64::MAX),
        queue: cfg.queue,
        queue_max: cfg.queue_max.unwrap_or(0),
        hold_reason: String::new(),
    }
}

/// The holder record of `redlock-run hold`: no COMMAND, a reason, and
/// nothing to stop (a force-release deletes it at once).
pub fn hold_record(reason: &str, label: &str, ttl: Duration) -> Holder {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Holder {
        host: host(),
        pid: std::process::id(),
        user: user(),
        command: String::new(),
        acquired_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        label: label.to_string(),
        refresh_ms: ms(ttl / 3),
        kill_after_ms: 0,
        queue: crate::queue::Queue::default(),
        queue_max: 0,
        hold_reason: reason.to_string(),
    }
}

fn host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// COMMAND as the holder record keeps it, which anyone who can run
/// `status` reads: every URL's password redacted (`redis://u:pw@h` in a
/// job's arguments, each of a comma-separated list), and any password we
/// know scrubbed.
fn recorded(command: &str) -> String {
    crate::secrets::scrub(&crate::secrets::redact_urls(command))
}

/// Who we run as, without an NSS lookup on the start-up path (it costs
/// a read of nsswitch.conf and /etc/passwd, or a round trip to nscd, on
/// every run): `$USER` or `$LOGNAME` as cron, login and sudo set them;
/// where neither is set (systemd services, containers), the uid's name in
/// /etc/passwd, read directly; else "uid N".
fn user() -> String {
    let uid = nix::unistd::getuid();
    match std::env::var("USER").or_else(|_| std::env::var("LOGNAME")) {
        Ok(name) if !name.is_empty() && name.len() <= 64 => name,
        _ => std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|passwd| passwd_name(&passwd, uid.as_raw()))
            .unwrap_or_else(|| format!("uid {uid}")),
    }
}

/// The name of `uid` in a passwd file's text (`name:x:uid:gid:...`): the
/// first entry with it, skipping NIS's `+`/`-` lines and names that are
/// empty, long or hold control characters.
fn passwd_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?.parse::<u32>().ok()?;
        let usable = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with(['+', '-'])
            && !name.chars().any(char::is_control);
        (id == uid && usable).then(|| name.to_string())
    })
}

/// A holder record as Redis gave it back: every field untrusted, any of
/// them missing (written by hand, or by an older version of this tool).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shown {
    pub host: Option<String>,
    pub pid: Option<String>,
    pub user: Option<String>,
    pub command: Option<String>,
    /// RFC 3339, by the holder's own clock.
    pub acquired_at: Option<String>,
    /// Its `--label` (a CI job's URL); absent in older records.
    pub label: Option<String>,
    /// When its COMMAND ended, if `--min-hold` keeps the lock after it
    /// (RFC 3339, by the holder's clock).
    pub ended_at: Option<String>,
    /// `redlock-run hold`: why KEY is held (absent: a run).
    pub hold_reason: Option<String>,
    /// A hold's end, Unix milliseconds by the server's clock.
    pub hold_until: Option<u64>,
    /// `--replace-running`: who is replacing this holder.
    pub replaced_by: Option<String>,
}

impl Shown {
    /// From a record read field by field.
    pub fn of<'a>(field: impl Fn(&str) -> Option<&'a str>) -> Shown {
        let text = |name: &str| field(name).map(str::to_string);
        Shown {
            host: text("host"),
            pid: text("pid"),
            user: text("user"),
            command: text("command"),
            acquired_at: text("acquired_at"),
            label: text("label").filter(|l| !l.is_empty()),
            ended_at: text("ended_at"),
            hold_reason: text("hold_reason"),
            hold_until: field("hold_until").and_then(|t| t.parse().ok()),
            replaced_by: text("replaced_by").filter(|b| !b.is_empty()),
        }
    }

    /// "on hold (REASON) until 2026-12-01T10:00:30Z by ", for a hold.
    pub fn on_hold(&self) -> Option<String> {
        let reason = self.hold_reason.as_deref()?;
        let until = self
            .hold_until
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
            .map(|t| format!(" until {}", humantime::format_rfc3339_seconds(t)))
            .unwrap_or_default();
        Some(format!("on hold ({}){until} by ", untrusted(reason)))
    }

    /// From a busy answer (empty fields: not in the record).
    pub fn of_busy(info: &BusyInfo) -> Shown {
        let given = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Shown {
            host: given(&info.host),
            pid: given(&info.pid),
            user: given(&info.user),
            acquired_at: given(&info.acquired_at),
            label: given(&info.label),
            hold_reason: given(&info.hold_reason),
            ..Shown::default()
        }
    }

    /// "web1 pid 4242 (root) [LABEL]"; without host and pid "an unknown
    /// holder, token T" (or without a token, "an unknown holder").
    pub fn who(&self, token: Option<&str>) -> String {
        let mut who = self.who_alone(token);
        if let Some(label) = &self.label {
            who.push_str(&format!(" [{}]", untrusted(label)));
        }
        who
    }

    /// [`Shown::who`] without the label.
    pub fn who_alone(&self, token: Option<&str>) -> String {
        match (&self.host, &self.pid) {
            (Some(host), Some(pid)) => {
                let mut who = format!("{} pid {}", untrusted(host), untrusted(pid));
                if let Some(user) = self.user.as_deref().filter(|u| !u.is_empty()) {
                    who.push_str(&format!(" ({})", untrusted(user)));
                }
                who
            }
            _ => match token {
                Some(token) => format!("an unknown holder, token {}", untrusted(token)),
                None => "an unknown holder".to_string(),
            },
        }
    }

    /// How long ago it acquired the lock, by its own clock.
    pub fn age(&self, now: SystemTime) -> Option<Duration> {
        since(self.acquired_at.as_deref()?, now)
    }

    /// How long ago its COMMAND ended, when `--min-hold` keeps the lock
    /// after it (by its own clock; zero if it reads as later than now).
    pub fn ended(&self, now: SystemTime) -> Option<Duration> {
        since(self.ended_at.as_deref()?, now)
    }
}

/// How long before `now` the RFC 3339 time `at` was (zero if after).
fn since(at: &str, now: SystemTime) -> Option<Duration> {
    let at = humantime::parse_rfc3339_weak(at).ok()?;
    Some(now.duration_since(at).unwrap_or_default())
}

impl Shown {}

/// What follows a holder's name: each part only when known.
#[derive(Debug, Clone, Copy, Default)]
pub struct Details<'a> {
    /// How long it keeps the lock.
    pub expires: Option<Duration>,
    pub fence: Option<i64>,
    /// On how many of how many nodes, said only with several.
    pub nodes: Option<(usize, usize)>,
    /// Its COMMAND, from the record.
    pub command: Option<&'a str>,
}

/// " for 12s, expires in 18s, fence 42, on 2 of 3 nodes: pg_dump".
pub fn details(shown: &Shown, more: Details, now: SystemTime) -> String {
    let mut line = String::new();
    if let Some(age) = shown.age(now) {
        line.push_str(&format!(" for {}", short(age)));
    }
    if let Some(left) = more.expires {
        line.push_str(&format!(", expires in {}", short(left)));
    }
    if let Some(fence) = more.fence {
        line.push_str(&format!(", fence {fence}"));
    }
    if let Some((holding, nodes @ 2..)) = more.nodes {
        line.push_str(&format!(", on {holding} of {nodes} nodes"));
    }
    if let Some(command) = more.command {
        line.push_str(&format!(": {}", untrusted(command)));
    }
    line
}

/// The busy holder's `--label` as a JSON event's `label` field (absent
/// when it has none).
pub fn label_field(info: &BusyInfo) -> crate::log::Field {
    label_of(&info.label)
}

/// A hold's reason as a JSON event's `hold_reason` field (absent when
/// the busy holder is a run).
pub fn hold_field(info: &BusyInfo) -> crate::log::Field {
    match info.hold_reason.as_str() {
        "" => ("hold_reason", serde_json::Value::Null),
        reason => crate::log::field("hold_reason", reason),
    }
}

/// A label as a JSON event's `label` field (absent when empty).
pub fn label_of(label: &str) -> crate::log::Field {
    match label {
        "" => ("label", serde_json::Value::Null),
        label => crate::log::field("label", label),
    }
}

/// "1 holder", "3 holders".
pub fn holders(n: usize) -> String {
    match n {
        1 => "1 holder".to_string(),
        n => format!("{n} holders"),
    }
}

/// A semaphore's holders: "3 holders (limit 3)".
pub fn group(n: usize, limit: u32) -> String {
    format!("{} (limit {limit})", holders(n))
}

/// A busy answer, after "lock 'KEY' ": "is held by web1 pid 4242 for
/// 12s, expires in 18s"; a full semaphore "is held by 3 holders (limit
/// 3) for 12s, the first expires in 18s".
pub fn describe_holder(info: &BusyInfo) -> String {
    describe_busy(info, SystemTime::now())
}

fn describe_busy(info: &BusyInfo, now: SystemTime) -> String {
    if info.revoked {
        return "is being force-released; waiting for its holder to stop".to_string();
    }
    let shown = Shown::of_busy(info);
    if let Some(SlotsTaken {
        holders: n,
        limit: 0,
    }) = info.slots
    {
        let more = Details {
            expires: info.pttl,
            ..Details::default()
        };
        return format!(
            "is held shared by {} (the newest: {}{})",
            holders(usize::try_from(n).unwrap_or(usize::MAX)),
            shown.who(None),
            details(&shown, more, now)
        );
    }
    let Some(SlotsTaken { holders, limit }) = info.slots else {
        let more = Details {
            expires: info.pttl,
            ..Details::default()
        };
        let held = match &shown.hold_reason {
            Some(reason) => format!("is on hold ({}) by", untrusted(reason)),
            None => "is held by".to_string(),
        };
        return format!("{held} {}{}", shown.who(None), details(&shown, more, now));
    };
    let holders = usize::try_from(holders).unwrap_or(usize::MAX);
    let mut text = format!(
        "is held by {}{}",
        group(holders, limit),
        details(&shown, Details::default(), now)
    );
    if let Some(left) = info.pttl {
        text.push_str(&format!(", the first expires in {}", short(left)));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_named_by_the_passwd_file() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      +nis:x:1000:1000::/:/bin/sh\n\
                      broken line\n\
                      :x:1001:1001::/:/bin/sh\n\
                      deploy:x:1000:1000:Deploy:/home/deploy:/bin/sh\n\
                      again:x:1000:1000::/:/bin/sh\n";
        assert_eq!(passwd_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(passwd, 1000).as_deref(), Some("deploy"));
        assert_eq!(passwd_name(passwd, 1001), None);
        assert_eq!(passwd_name(passwd, 7), None);
        assert_eq!(passwd_name("", 0), None);
    }

    fn at(rfc3339: &str) -> SystemTime {
        humantime::parse_rfc3339(rfc3339).expect("time")
    }

    fn busy(host: &str) -> BusyInfo {
        BusyInfo {
            pttl: Some(Duration::from_secs(18)),
            host: host.into(),
            pid: "4242".into(),
            acquired_at: "2026-12-01T10:00:00.000Z".into(),
            user: String::new(),
            label: String::new(),
            hold_reason: String::new(),
            slots: None,
            revoked: false,
            replaced_by: None,
            line_full: None,
            place: None,
            split: false,
            reset: false,
            counted: true,
            held_by: None,
        }
    }

    #[test]
    fn a_busy_answer_reads_like_status() {
        let now = at("2026-12-01T10:00:12Z");
        assert_eq!(
            describe_busy(&busy("web1"), now),
            "is held by web1 pid 4242 for 12s, expires in 18s"
        );
        assert_eq!(
            describe_busy(&busy(""), now),
            "is held by an unknown holder for 12s, expires in 18s"
        );
        let full = BusyInfo {
            slots: Some(SlotsTaken {
                holders: 3,
                limit: 3,
            }),
            ..busy("web1")
        };
        assert_eq!(
            describe_busy(&full, now),
            "is held by 3 holders (limit 3) for 12s, the first expires in 18s"
        );
        let shared = BusyInfo {
            slots: Some(SlotsTaken {
                holders: 2,
                limit: 0,
            }),
            ..busy("web1")
        };
        assert_eq!(
            describe_busy(&shared, now),
            "is held shared by 2 holders (the newest: web1 pid 4242 for 12s, expires in 18s)"
        );
        let revoked = BusyInfo {
            revoked: true,
            ..busy("web1")
        };
        assert!(describe_busy(&revoked, now).starts_with("is being force-released"));
        let hold = BusyInfo {
            hold_reason: "deploy freeze\u{1b}".into(),
            ..busy("web1")
        };
        assert_eq!(
            describe_busy(&hold, now),
            "is on hold (deploy freeze\\u{1b}) by web1 pid 4242 for 12s, expires in 18s"
        );
        let labelled = BusyInfo {
            user: "ci".into(),
            label: "https://ci.example/job/7\u{1b}[2J".into(),
            ..busy("web1")
        };
        assert_eq!(
            describe_busy(&labelled, now),
            "is held by web1 pid 4242 (ci) [https://ci.example/job/7\\u{1b}[2J] for 12s, \
             expires in 18s"
        );
    }

    #[test]
    fn record_fields_are_escaped() {
        let shown = Shown {
            host: Some("we\u{1b}b1".into()),
            pid: Some("1".into()),
            user: Some("root".into()),
            ..Shown::default()
        };
        assert_eq!(shown.who(None), "we\\u{1b}b1 pid 1 (root)");
        assert_eq!(
            Shown::default().who(Some("t")),
            "an unknown holder, token t"
        );
    }
}
