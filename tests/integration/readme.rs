//! The README promises things the binary and CI must keep: the test
//! command CI runs, the exit codes, and the options of `--help`.

use crate::common::*;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
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
    let man = run_with_timeout(
        redlock_bare().args(["generate", "man"]),
        std::time::Duration::from_secs(30),
    );
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

#[test]
fn every_long_option_of_help_is_in_the_readme() {
    let help = run_with_timeout(
        redlock_bare().arg("--help"),
        std::time::Duration::from_secs(30),
    );
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
