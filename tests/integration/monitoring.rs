//! The alert rules and the dashboard in `contrib/`: the rules pass their
//! own `promtool test rules` unit tests, and every metric that the rules
//! and the dashboard use is one the binary writes.

use crate::common::*;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn contrib(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("contrib")
        .join(path)
}

/// Every `redlock_run_*` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("redlock_run_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The metric names in the files that real runs write: one that succeeds,
/// one that finds the lock busy, one that runs without the lock
/// (`--on-unavailable run` against a closed port).
fn written_metric_names() -> BTreeSet<String> {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let m = dir.path().to_str().unwrap().to_string();
    let ok = run_with_timeout(
        redlock(&server.url()).args(["--metrics-textfile", &m, "-k", "k", "--", "true"]),
        LONG,
    );
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    let closed = format!("redis://127.0.0.1:{}", free_port());
    let unlocked = run_with_timeout(
        redlock(&closed).args([
            "--metrics-textfile",
            &m,
            "-k",
            "u",
            "--on-unavailable",
            "run",
            "--",
            "true",
        ]),
        LONG,
    );
    assert_eq!(unlocked.code, Some(0), "{}", unlocked.stderr);
    let unlocked = "redlock_run_unlocked_runs_total";
    let u = parse_prom(&dir.path().join("redlock_run_u.prom"));
    assert_eq!(prom_value(&u, unlocked, &[("key", "u")]), Some(1.0));
    let k = parse_prom(&dir.path().join("redlock_run_k.prom"));
    assert_eq!(prom_value(&k, unlocked, &[("key", "k")]), Some(0.0));
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "prom") {
            continue; // the lock files beside them
        }
        let samples = parse_prom(&path);
        names.extend(samples.into_iter().map(|s| s.name));
    }
    names
}

#[test]
fn alert_rules_pass_their_unit_tests() {
    if !have_tool("promtool", "prometheus") {
        return;
    }
    let dir = contrib("prometheus");
    for args in [
        ["check", "rules", "redlock-run.rules.yml"],
        ["test", "rules", "redlock-run.rules.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every rule has a test: each alert name appears in the test file.
    let rules = fs::read_to_string(dir.join("redlock-run.rules.yml")).unwrap();
    let tests = fs::read_to_string(dir.join("redlock-run.rules.test.yml")).unwrap();
    for line in rules.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(
                tests.contains(&format!("alertname: {name}")),
                "alert {name} has no promtool test"
            );
        }
    }
}

/// The dashboard's queries, with Grafana's variables given values.
fn dashboard_queries() -> Vec<String> {
    let text = fs::read_to_string(contrib("grafana/redlock-run.json")).unwrap();
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).expect("contrib/grafana/redlock-run.json is not valid JSON");
    assert_eq!(dashboard["title"], "redlock-run");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut exprs = Vec::new();
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            exprs.push(expr.replace("$__rate_interval", "5m").replace("$key", ".*"));
        }
    }
    exprs
}

#[test]
fn rules_and_dashboard_use_only_metrics_the_binary_writes() {
    let written = written_metric_names();
    let rules = fs::read_to_string(contrib("prometheus/redlock-run.rules.yml")).unwrap();
    let queries = dashboard_queries();
    let used: BTreeSet<String> = metric_names(&rules)
        .into_iter()
        .chain(queries.iter().flat_map(|q| metric_names(q)))
        .collect();
    let unknown: Vec<_> = used.difference(&written).collect();
    assert!(
        unknown.is_empty(),
        "used but never written: {unknown:?} (written: {written:?})"
    );
    // The dashboard shows every metric there is.
    let shown: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    let missing: Vec<_> = written.difference(&shown).collect();
    assert!(missing.is_empty(), "not on the dashboard: {missing:?}");
}

#[test]
fn dashboard_queries_are_valid_promql() {
    if !have_tool("promtool", "prometheus") {
        return;
    }
    // promtool parses PromQL in rule files: each query as a recording rule.
    let dir = TestDir::new();
    let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in dashboard_queries().iter().enumerate() {
        file.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {}\n",
            serde_json::to_string(q).unwrap()
        ));
    }
    fs::write(dir.file("dashboard.yml"), &file).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(dir.file("dashboard.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}\n{file}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
