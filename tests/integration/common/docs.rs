//! What the man page documents, read back from `redlock-run generate man`
//! so that tests check the documentation users copy from.

use std::time::Duration;

use crate::common::{redlock_bare, run_with_timeout};

/// The man page as plain text (roff escapes for `-`, `'` and `\` undone).
pub fn man_page_text() -> String {
    let out = run_with_timeout(
        redlock_bare().args(["generate", "man"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout
        .replace(r"\-", "-")
        .replace(r"\*(Aq", "'")
        .replace(r"\\", "\\")
}

/// The rules of the man page's `redis-cli ACL SETUSER redlock on
/// '>PASSWORD' ...` command, as redis-server `--user` arguments.
pub fn documented_acl_rules() -> Vec<String> {
    let page = man_page_text();
    let mut command = String::new();
    for line in page
        .lines()
        .skip_while(|l| !l.contains("ACL SETUSER redlock on"))
    {
        command.push_str(line.trim_end_matches('\\'));
        command.push(' ');
        if !line.ends_with('\\') {
            break;
        }
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    assert!(
        words.starts_with(&[
            "redis-cli",
            "ACL",
            "SETUSER",
            "redlock",
            "on",
            "'>PASSWORD'"
        ]),
        "no ACL command in the man page: {command:?}"
    );
    words[6..].iter().map(|w| w.replace('\'', "")).collect()
}

/// The extra rules the man page names for `--limit N` above 1.
pub fn documented_semaphore_rules() -> Vec<String> {
    let page = man_page_text()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let marker = "(a counting semaphore) also grant: ";
    let start = page
        .find(marker)
        .expect("the man page names the semaphore's rules")
        + marker.len();
    let rules = page[start..].split('.').next().unwrap_or_default();
    rules.split_whitespace().map(String::from).collect()
}
