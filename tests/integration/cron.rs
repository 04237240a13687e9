//! Every crontab line the README, `docs/`, the man page and `--help` show,
//! run as a fleet would run it: the same line on three hosts whose cron
//! fires 1 s apart, a job of 0.5 s. It must run once, and the hosts that
//! find the lock taken must print nothing (cron mails any output).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

const LONG: Duration = Duration::from_secs(60);

/// The job each host runs: a line in `marker`, then half a second of work.
fn job(marker: &Path) -> [String; 3] {
    let script = format!("echo ran >> '{}'; sleep 0.5", marker.display());
    ["sh".into(), "-c".into(), script]
}

/// A crontab line: five schedule fields, then a `redlock-run` command.
fn cron_command(line: &str) -> Option<Vec<String>> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let schedule = words.get(..5)?;
    let field = |w: &&str| w.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c));
    if !schedule.iter().all(field) || !words.get(5)?.ends_with("redlock-run") {
        return None;
    }
    Some(words[6..].iter().map(|w| w.to_string()).collect())
}

/// Every documented crontab line, with where it was found.
fn documented_cron_lines() -> Vec<(String, String)> {
    let help = run_with_timeout(redlock_bare().arg("--help").env("COLUMNS", "1000"), LONG);
    assert_eq!(help.code, Some(0), "{help:?}");
    let mut sources = user_docs();
    sources.push(("the man page".into(), man_page_text()));
    sources.push(("--help".into(), help.stdout));
    let mut lines = Vec::new();
    for (source, text) in sources {
        for line in text.lines() {
            let line = line.trim();
            if cron_command(line).is_some() {
                lines.push((source.clone(), line.to_string()));
            }
        }
    }
    for source in ["README.md", "the man page", "--help"] {
        assert!(
            lines.iter().any(|(s, _)| s == source),
            "no crontab line found in {source}"
        );
    }
    lines
}

/// The options of a documented line, before its `--` (its own command
/// is replaced by the test's job); a directory it names becomes one in
/// `dir`, since the documented one does not exist here.
fn options_of(line: &str, dir: &TestDir) -> Vec<String> {
    let words = cron_command(line).expect("a crontab line");
    let end = words
        .iter()
        .position(|w| w == "--")
        .unwrap_or_else(|| panic!("no `--` before COMMAND in the crontab line {line:?}"));
    let mut options = words[..end].to_vec();
    for (i, word) in options.clone().iter().enumerate() {
        assert!(
            !word.contains(['\'', '"', '$']),
            "{line:?}: the test splits lines at spaces only"
        );
        if word == "--metrics-textfile" {
            options[i + 1] = dir.path().display().to_string();
        }
    }
    options
}

/// Three "hosts" start `options` with the job at `starts` (seconds after
/// the first), as cron would; their outputs, in order.
fn fleet(url: &str, options: &[String], marker: &Path, starts: &[u64]) -> Vec<Output> {
    let begin = Instant::now();
    let mut hosts = Vec::new();
    for at in starts {
        // The scenario itself: cron firing on hosts a second apart.
        let due = begin + Duration::from_secs(*at);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let mut cmd: Command = redlock_bare();
        cmd.env("REDLOCK_REDIS_URL", url)
            .args(options)
            .arg("--")
            .args(job(marker));
        hosts.push(spawn_piped(&mut cmd));
    }
    hosts.iter_mut().map(|h| h.wait_timeout(LONG)).collect()
}

fn runs(marker: &Path) -> usize {
    std::fs::read_to_string(marker)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn every_documented_crontab_line_runs_a_short_job_once_and_silently() {
    let lines = documented_cron_lines();
    for (source, line) in lines {
        let server = RedisServer::start();
        let dir = TestDir::new();
        let marker = dir.file("ran");
        let outs = fleet(&server.url(), &options_of(&line, &dir), &marker, &[0, 1, 2]);
        assert_eq!(
            runs(&marker),
            1,
            "{source}: `{line}` ran a 0.5 s job on {} of three hosts started 1 s apart: {outs:?}",
            runs(&marker)
        );
        for out in outs {
            assert_eq!(out.code, Some(0), "{source}: `{line}`: {out:?}");
            assert_eq!(
                (out.stdout.as_str(), out.stderr.as_str()),
                ("", ""),
                "{source}: `{line}` printed something (cron would mail it)"
            );
        }
    }
}

#[test]
fn period_frees_the_lock_for_the_next_run_of_the_schedule() {
    // The documented rule at a small scale: three hosts 1 s apart, twice,
    // with the schedule's period between the rounds.
    let server = RedisServer::start();
    let dir = TestDir::new();
    let marker = dir.file("ran");
    let options: Vec<String> = ["-k", "report", "--period", "8s", "-n", "-E", "0", "-q"]
        .map(String::from)
        .into();
    let outs = fleet(&server.url(), &options, &marker, &[0, 1, 2, 8, 9, 10]);
    assert_eq!(runs(&marker), 2, "once per period: {outs:?}");
    for out in outs {
        assert_eq!(out.code, Some(0), "{out:?}");
    }
}

#[test]
fn period_takes_no_wait_and_no_min_hold_and_bounds_random_delay() {
    for (args, names) in [
        (&["--period", "5m", "--wait", "10s"][..], "--wait"),
        (&["--period", "5m", "--min-hold", "1m"][..], "--min-hold"),
        (&["--period", "1m", "--random-delay", "30s"][..], "30s"),
    ] {
        let out = run_with_timeout(
            redlock("redis://127.0.0.1:1")
                .args(["-k", "report"])
                .args(args)
                .args(["--", "true"]),
            LONG,
        );
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(first.contains(names), "{args:?}: {first}");
    }
}
