//! What the man page and the README document, read back (the man page
//! from `redlock-run generate man`) so that tests check the documentation
//! users copy from.

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

/// The README as it is in the source tree.
pub fn readme_text() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

/// The words of the `redis-cli ACL SETUSER redlock on '>PASSWORD' ...`
/// command in `text` (continued over lines ending in `\`), as written.
pub fn acl_command_in(text: &str, what: &str) -> Vec<String> {
    let mut command = String::new();
    for line in text
        .lines()
        .skip_while(|l| !l.contains("ACL SETUSER redlock on"))
    {
        command.push_str(line.trim_end().trim_end_matches('\\'));
        command.push(' ');
        if !line.trim_end().ends_with('\\') {
            break;
        }
    }
    let words: Vec<String> = command.split_whitespace().map(String::from).collect();
    assert!(
        words.starts_with(&[
            "redis-cli".into(),
            "ACL".into(),
            "SETUSER".into(),
            "redlock".into(),
            "on".into(),
            "'>PASSWORD'".into()
        ]),
        "no ACL command in the {what}: {command:?}"
    );
    words
}

/// The rules of the man page's `redis-cli ACL SETUSER redlock on
/// '>PASSWORD' ...` command, as redis-server `--user` arguments.
pub fn documented_acl_rules() -> Vec<String> {
    let words = acl_command_in(&man_page_text(), "man page");
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
