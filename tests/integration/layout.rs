//! CONTRIBUTING.md's source layout lists every file under `src/`, one
//! line each: this checks the list against `git ls-files src` so that it
//! cannot go stale, and says which lines to add or remove.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::common::*;

const BEGIN: &str = "<!-- source layout: begin -->";
const END: &str = "<!-- source layout: end -->";

/// The width of the path column in the layout block.
const PATH_COLUMN: usize = 22;

/// The block's lines as path -> what the file owns, failing on a line
/// without a description and on a path listed twice.
fn listed(contributing: &str) -> BTreeMap<String, String> {
    let block = contributing
        .split_once(BEGIN)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("CONTRIBUTING.md has no block between {BEGIN} and {END}"));
    let mut files = BTreeMap::new();
    for line in block.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("```") {
            continue;
        }
        let (path, what) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        assert!(
            !what.trim().is_empty(),
            "CONTRIBUTING.md's layout: {path} says nothing about what it owns"
        );
        let earlier = files.insert(path.to_string(), what.trim().to_string());
        assert!(
            earlier.is_none(),
            "CONTRIBUTING.md's layout lists {path} twice"
        );
    }
    files
}

/// The files under `src/` that git tracks, or None (with a note, or a
/// failure under REDLOCK_TEST_REQUIRE_TOOLS=1) outside a git checkout.
fn tracked() -> Option<BTreeSet<String>> {
    if !have_tool("git", "git") {
        return None;
    }
    let out = Command::new("git")
        .args(["ls-files", "-z", "--", "src"])
        .current_dir(source_root())
        .output()
        .expect("git ls-files");
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(
            !tools_required(),
            "git ls-files src failed ({}), and REDLOCK_TEST_REQUIRE_TOOLS=1",
            why.trim()
        );
        eprintln!("skipped: not a git checkout: {}", why.trim());
        return None;
    }
    let files: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|f| !f.is_empty())
        .map(String::from)
        .collect();
    assert!(files.contains("src/main.rs"), "{files:?}");
    Some(files)
}

/// A line for the layout block: the path, then a first draft of what it
/// owns from the file's first `//!` line (to be shortened by hand).
fn line_to_add(path: &str) -> String {
    let draft = std::fs::read_to_string(source_root().join(path))
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("//!")
                    .map(str::trim)
                    .map(String::from)
            })
        })
        .filter(|first| !first.is_empty())
        .unwrap_or_else(|| "WHAT IT OWNS".to_string());
    format!("{path:<width$}{draft}", width = PATH_COLUMN)
}

#[test]
fn contributings_layout_lists_every_file_under_src() {
    let Some(tracked) = tracked() else {
        return;
    };
    let listed = listed(&source_file("CONTRIBUTING.md"));
    let listed_paths: BTreeSet<String> = listed.keys().cloned().collect();
    let missing: Vec<&String> = tracked.difference(&listed_paths).collect();
    let extra: Vec<&String> = listed_paths.difference(&tracked).collect();
    let mut report = String::new();
    if !missing.is_empty() {
        report.push_str(&format!(
            "add these lines to CONTRIBUTING.md, between {BEGIN} and {END} \
             (the text after the path drafted from each file's first //! line):\n"
        ));
        for path in &missing {
            report.push_str(&format!("{}\n", line_to_add(path)));
        }
    }
    if !extra.is_empty() {
        report.push_str("remove these lines from it (git ls-files src has no such file):\n");
        for path in &extra {
            report.push_str(&format!(
                "{path:<width$}{}\n",
                listed[*path],
                width = PATH_COLUMN
            ));
        }
    }
    assert!(
        report.is_empty(),
        "CONTRIBUTING.md's source layout differs from `git ls-files src`:\n{report}"
    );
}

#[test]
fn the_layout_block_is_read_line_by_line() {
    let text = format!(
        "intro\n{BEGIN}\n```\nsrc/main.rs           parse, dispatch\nsrc/a/b.rs  owns b\n```\n{END}\nsrc/not.rs after\n"
    );
    let files = listed(&text);
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(paths, ["src/a/b.rs", "src/main.rs"]);
    assert_eq!(files["src/main.rs"], "parse, dispatch");
}
