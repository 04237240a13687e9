//! The README promises things the binary and CI must keep: the test
//! command CI runs, the exit codes, the options of `--help`, the ACL
//! command, and the shell examples marked to run (as `just` checks its
//! README against its binary).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

const T: Duration = Duration::from_secs(30);

/// What goes on the line before a code fence whose block the tests run.
const RUNS_IN_TESTS: &str = "<!-- runs in tests -->";

fn readme() -> String {
    readme_text()
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = readme();
    let ci =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).expect(".ci/run");
    let try_it = readme
        .split_once("\n## Try it\n")
        .map(|(_, rest)| rest)
        .expect("README has ## Try it");
    let block = try_it.split("```").nth(1).expect("a code block in Try it");
    // Skip the info string; drop comments and blank lines.
    let commands: Vec<&str> = block
        .lines()
        .skip(1)
        .map(|l| l.split(" #").next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(commands.first(), Some(&"scripts/demo.sh"), "{commands:?}");
    assert_eq!(commands.get(1), Some(&"scripts/test.sh"), "{commands:?}");
    let last = ci
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default();
    assert_eq!(last, "scripts/test.sh", ".ci/run must end by running it");
    let test_sh = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test.sh"))
        .expect("scripts/test.sh");
    assert!(
        test_sh
            .lines()
            .any(|l| l.trim() == "REDLOCK_TEST_REQUIRE_TOOLS=1 exec cargo test --locked \"$@\""),
        "scripts/test.sh runs the suite with missing tools failing"
    );
}

#[test]
fn exit_codes_in_the_readme_match_the_man_page() {
    // The man page is generated from the binary's own exit-code table.
    let man = run_with_timeout(redlock_bare().args(["generate", "man"]), T);
    assert_eq!(man.code, Some(0));
    let readme = readme();
    for code in [
        "128 + N",
        "| 2 |",
        "75 (or `-E N`)",
        "| 69 |",
        "| 70 |",
        "| 124 |",
        "126 / 127",
        "| 1 |",
    ] {
        assert!(readme.contains(code), "README exit-code table lacks {code}");
    }
    for code in ["69", "70", "75", "124", "126", "127"] {
        assert!(man.stdout.contains(code), "man page lacks exit code {code}");
    }
}

/// The rows (code, when) of the README's `## Exit codes` table, with the
/// Markdown code spans' backticks taken out.
fn readme_exit_rows(readme: &str) -> Vec<(String, String)> {
    let section = readme
        .split_once("\n## Exit codes\n")
        .map(|(_, rest)| rest)
        .expect("README has ## Exit codes");
    let rows: Vec<(String, String)> = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 2, "not a two-cell row: {l}");
            let plain = |cell: &str| cell.trim().replace('`', "");
            (plain(cells[0]), plain(cells[1]))
        })
        .collect();
    assert!(rows.len() >= 8, "{rows:?}");
    rows
}

/// The rows (code, when) of the `Exit status:` table at the end of the
/// long `--help`, which the binary writes from `Exit::ROWS`.
fn help_exit_rows() -> Vec<(String, String)> {
    // Wide enough that clap does not wrap a row onto a second line.
    let help = run_with_timeout(redlock_bare().arg("--help").env("COLUMNS", "1000"), T);
    assert_eq!(help.code, Some(0), "{help:?}");
    let table = help
        .stdout
        .split_once("\nExit status:\n")
        .map(|(_, rest)| rest)
        .expect("--help has Exit status:");
    let rows: Vec<(String, String)> = table
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            // `  {code:<14}{when}`: the code column is 14 wide.
            let (code, when) = l[2..].split_at(14.min(l.len() - 2));
            (code.trim().to_string(), when.trim().to_string())
        })
        .collect();
    assert!(rows.len() >= 8, "{}", help.stdout);
    rows
}

#[test]
fn the_readmes_exit_codes_are_the_binarys() {
    let readme = readme_exit_rows(&readme());
    let binary = help_exit_rows();
    assert_eq!(
        readme, binary,
        "the README's ## Exit codes table must say what `redlock-run --help` says (Exit::ROWS)"
    );
}

#[test]
fn the_readmes_acl_command_is_the_man_pages() {
    let readme = readme();
    let man = man_page_text();
    assert_eq!(
        acl_command_in(&readme, "README"),
        acl_command_in(&man, "man page"),
        "the README's ACL SETUSER command differs from the man page's"
    );
    // And the extra rules for a semaphore.
    let marker = "For `--limit N` above 1 also grant `";
    let extra = readme
        .split_once(marker)
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(rules, _)| rules.split_whitespace().map(String::from))
        .expect("the README names the semaphore's rules");
    let extra: Vec<String> = extra.collect();
    assert_eq!(extra, documented_semaphore_rules());
}

#[test]
fn every_long_option_of_help_is_in_the_readme() {
    let help = run_with_timeout(redlock_bare().arg("--help"), T);
    assert_eq!(help.code, Some(0));
    let readme = readme();
    let options: Vec<&str> = help
        .stdout
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| {
            w.starts_with("--")
                && w.len() > 2
                && w[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .collect();
    assert!(options.contains(&"--key"), "{options:?}");
    for option in options {
        if ["--help", "--version"].contains(&option) {
            continue;
        }
        let documented = [" ", "`", "="]
            .iter()
            .any(|end| readme.contains(&format!("{option}{end}")));
        assert!(documented, "README does not document {option}");
    }
}

/// The code blocks whose fence follows a `RUNS_IN_TESTS` line, with the
/// line number of their fence.
fn runnable_blocks(readme: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != RUNS_IN_TESTS {
            continue;
        }
        let fence = lines.get(i + 1).copied().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "README line {}: {RUNS_IN_TESTS} is not right before a code fence",
            i + 1
        );
        let body: Vec<&str> = lines[i + 2..]
            .iter()
            .take_while(|l| !l.starts_with("```"))
            .copied()
            .collect();
        blocks.push((i + 2, body.join("\n") + "\n"));
    }
    blocks
}

#[test]
fn the_readmes_marked_examples_run() {
    let blocks = runnable_blocks(&readme());
    assert!(blocks.len() >= 3, "only {} marked blocks", blocks.len());
    // `redlock-run` in the examples is the binary under test.
    let bin_dir = Path::new(bin()).parent().expect("the binary's directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .expect("PATH");
    for (line, block) in blocks {
        let server = RedisServer::start();
        let dir = TestDir::new();
        let mut sh = Command::new("sh");
        sh.args(["-e", "-c", &block])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("REDLOCK_REDIS_URL", server.url())
            .env_remove("REDIS_URL")
            .env_remove("REDLOCK_LOG_FORMAT")
            .env_remove("REDLOCK_METRICS_DIR");
        let out = run_with_timeout(&mut sh, T);
        assert_eq!(
            out.code,
            Some(0),
            "the README's block at line {line} failed:\n{block}\n{out:?}"
        );
    }
}

/// Options only the long help shows.
const LONG_ONLY: [&str; 5] = [
    "--min-hold",
    "--tls-ca",
    "--replicas",
    "--metrics-textfile",
    "--kill-after",
];

#[test]
fn short_help_shows_what_a_first_user_needs_and_long_help_all() {
    let short = run_with_timeout(redlock_bare().arg("-h"), std::time::Duration::from_secs(30));
    assert_eq!(short.code, Some(0), "{short:?}");
    for option in [
        "--key",
        "--ttl",
        "--wait",
        "--no-wait",
        "--conflict-exit-code",
        "--command",
        "--redis",
        "--verbose",
        "--quiet",
    ] {
        assert!(
            short.stdout.contains(option),
            "-h lacks {option}:\n{}",
            short.stdout
        );
    }
    for option in LONG_ONLY {
        assert!(
            !short.stdout.contains(option),
            "-h shows {option}:\n{}",
            short.stdout
        );
    }
    assert!(short.stdout.contains("man redlock-run"), "{}", short.stdout);
    let long = run_with_timeout(
        redlock_bare().arg("--help"),
        std::time::Duration::from_secs(30),
    );
    for option in LONG_ONLY {
        assert!(long.stdout.contains(option), "--help lacks {option}");
    }
    for code in ["124", "69", "70", "75", "77", "126 / 127"] {
        assert!(long.stdout.contains(code), "--help lacks exit code {code}");
    }
}
