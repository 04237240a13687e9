//! What the man page, the README and `docs/*.md` document, read back (the
//! man page from `redlock-run generate man`) so that tests check the
//! documentation users copy from.

use std::path::{Path, PathBuf};
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

/// The source tree's root.
pub fn source_root() -> &'static Path {
    super::note_test();
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the source tree, by its path from the root (`docs/safety.md`).
pub fn source_file(path: &str) -> String {
    let full = source_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The README as it is in the source tree.
pub fn readme_text() -> String {
    source_file("README.md")
}

/// The pages of `docs/` (`docs/NAME.md`, sorted), by path from the root.
pub fn docs_pages() -> Vec<String> {
    let dir = source_root().join("docs");
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path: PathBuf| {
            let name = path.file_name().expect("a file name").to_string_lossy();
            format!("docs/{name}")
        })
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "no pages in {}", dir.display());
    pages
}

/// What users read beside the man page: README.md and every page of
/// `docs/`, each as (path from the root, text).
pub fn user_docs() -> Vec<(String, String)> {
    std::iter::once("README.md".to_string())
        .chain(docs_pages())
        .map(|path| {
            let text = source_file(&path);
            (path, text)
        })
        .collect()
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
