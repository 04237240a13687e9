//! `--metrics-textfile DIR`: the files it writes, read with a real
//! Prometheus text parser (see `common/prom.rs`).

use crate::common::*;

use std::fs;

/// The shape `src/metrics.rs` writes, with a key that needs escaping.
const SAMPLE: &str = r#"# HELP redlock_run_runs_total Runs of redlock-run for this key on this host, by outcome.
# TYPE redlock_run_runs_total counter
redlock_run_runs_total{key="db \"main\" \\ ü",outcome="ok"} 3
redlock_run_runs_total{key="db \"main\" \\ ü",outcome="failed"} 0
# HELP redlock_run_running 1 while a run holds the lock and runs its command, else 0.
# TYPE redlock_run_running gauge
redlock_run_running{key="db \"main\" \\ ü"} 1
# HELP redlock_run_last_start_timestamp_seconds Unix time the last run acquired the lock (0: never).
# TYPE redlock_run_last_start_timestamp_seconds gauge
redlock_run_last_start_timestamp_seconds{key="db \"main\" \\ ü"} 1700000000.123
"#;

#[test]
fn prom_helper_parses_a_written_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redlock_run_db.prom");
    fs::write(&path, SAMPLE).unwrap();
    let samples = parse_prom(&path);
    assert_eq!(samples.len(), 4, "{samples:?}");
    let key = "db \"main\" \\ ü";
    let runs = "redlock_run_runs_total";
    assert_eq!(
        prom_value(&samples, runs, &[("key", key), ("outcome", "ok")]),
        Some(3.0)
    );
    assert_eq!(
        prom_value(&samples, runs, &[("key", key), ("outcome", "failed")]),
        Some(0.0)
    );
    let start = "redlock_run_last_start_timestamp_seconds";
    assert_eq!(
        prom_value(&samples, start, &[("key", key)]),
        Some(1_700_000_000.123)
    );
}

#[test]
fn prom_helper_rejects_malformed_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.prom");
    let torn = &SAMPLE[..SAMPLE.len() - 5];
    let untyped = "redlock_run_running{key=\"k\"} 1\n";
    let bad_label = "# HELP a A.\n# TYPE a gauge\na{key=\"k} 1\n";
    let twice = "# HELP a A.\n# TYPE a gauge\na{key=\"k\"} 1\na{key=\"k\"} 2\n";
    for text in [torn, untyped, bad_label, twice] {
        fs::write(&path, text).unwrap();
        let result = std::panic::catch_unwind(|| parse_prom(&path));
        let message = result.expect_err(text);
        let message = message.downcast_ref::<String>().map_or("", String::as_str);
        assert!(
            message.contains("not a valid Prometheus text file"),
            "{message}"
        );
    }
}
