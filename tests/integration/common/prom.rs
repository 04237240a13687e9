//! Reading `--metrics-textfile` files with a real Prometheus text parser:
//! Python's `prometheus_client` (`pip install prometheus_client`), run from
//! `REDLOCK_TEST_PYTHON` (default `python3`).
//!
//! The parser rejects malformed lines (bad label syntax, a missing or
//! non-numeric value); on top of it the script requires what the textfile
//! collector and alerts rely on: a final newline, HELP and TYPE for every
//! family, each family once, and no sample twice.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Exit status of the script when `prometheus_client` cannot be imported.
const NO_MODULE: i32 = 3;

const SCRIPT: &str = r#"
import json, sys
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit(3)
out, families, seen = [], set(), set()
try:
    text = sys.stdin.buffer.read().decode("utf-8")
    if not text.endswith("\n"):
        sys.exit("malformed: no newline at the end")
    for family in text_string_to_metric_families(text):
        if family.type == "unknown" or not family.documentation:
            sys.exit(f"malformed: {family.name} has no TYPE or no HELP")
        if family.name in families:
            sys.exit(f"malformed: {family.name} appears twice")
        families.add(family.name)
        for s in family.samples:
            ident = (s.name, tuple(sorted(s.labels.items())))
            if ident in seen:
                sys.exit(f"malformed: sample {ident} appears twice")
            seen.add(ident)
            out.append([s.name, s.labels, repr(float(s.value))])
except ValueError as e:
    sys.exit(f"malformed: {e}")
json.dump(out, sys.stdout)
"#;

/// Parses the file at `path`; panics (with the parser's reason) if it is
/// not a valid text-format file, or if Python or its module is missing.
pub fn parse_prom(path: &Path) -> Vec<Sample> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let python = std::env::var("REDLOCK_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{python} (REDLOCK_TEST_PYTHON): {e}"));
    // Python reads all of stdin before it writes, so this cannot deadlock.
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(&text).expect("write to python");
    drop(stdin);
    let out = child.wait_with_output().expect("wait for python");
    if out.status.code() == Some(NO_MODULE) {
        panic!("{python} has no prometheus_client module: pip install prometheus_client");
    }
    assert!(
        out.status.success(),
        "{} is not a valid Prometheus text file: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let rows: Vec<(String, BTreeMap<String, String>, String)> =
        serde_json::from_slice(&out.stdout).expect("JSON from the parser script");
    rows.into_iter()
        .map(|(name, labels, value)| Sample {
            value: value.parse().expect("a float from repr()"),
            name,
            labels,
        })
        .collect()
}

/// The value of the one sample called `name` with exactly `labels`.
pub fn prom_value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == wanted)
        .map(|s| s.value)
}
