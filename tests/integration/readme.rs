//! The README and `docs/` promise things the binary and CI must keep: the
//! test command CI runs, the exit codes, the options of `--help`, the ACL
//! command, the shell examples marked to run (as `just` checks its README
//! against its binary), and links that lead somewhere.

use std::collections::BTreeSet;
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
            .any(|l| l.trim()
                == "REDLOCK_TEST_TIMES=$times REDLOCK_TEST_REQUIRE_TOOLS=1 cargo test --locked \"$@\" | tee \"$log\" || status=$?"),
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
            // `  CODE  WHEN`: two spaces or more end the code column.
            let (code, when) = l[2..].split_once("  ").unwrap_or((&l[2..], ""));
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
fn the_docs_acl_command_is_the_man_pages() {
    let security = source_file("docs/security.md");
    let man = man_page_text();
    assert_eq!(
        acl_command_in(&security, "docs/security.md"),
        acl_command_in(&man, "man page"),
        "the ACL SETUSER command of docs/security.md differs from the man page's"
    );
    // And the extra rules for a semaphore.
    let marker = "For `--limit N` above 1 also grant `";
    let extra = security
        .split_once(marker)
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(rules, _)| rules.split_whitespace().map(String::from))
        .expect("docs/security.md names the semaphore's rules");
    let extra: Vec<String> = extra.collect();
    assert_eq!(extra, documented_semaphore_rules());
}

/// Whether `text` mentions `option` as an option, not as the start of a
/// longer one (`--limit` is not mentioned by `--limits`).
fn mentions(text: &str, option: &str) -> bool {
    text.match_indices(option).any(|(at, _)| {
        text[at + option.len()..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_alphanumeric() && c != '-')
    })
}

#[test]
fn every_long_option_of_help_is_in_the_man_page_and_the_docs() {
    // The man page is the reference for every option; the README and
    // docs/ mention each at least once (the README's options table).
    let help = run_with_timeout(redlock_bare().arg("--help"), T);
    assert_eq!(help.code, Some(0));
    let man = man_page_text();
    let docs = user_docs();
    let options: BTreeSet<&str> = help
        .stdout
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|w| {
            w.starts_with("--")
                && w.len() > 2
                && w[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .collect();
    assert!(options.contains("--key"), "{options:?}");
    for option in options {
        if ["--help", "--version"].contains(&option) {
            continue;
        }
        assert!(
            mentions(&man, option),
            "the man page does not document {option}"
        );
        assert!(
            docs.iter().any(|(_, text)| mentions(text, option)),
            "neither README.md nor docs/*.md mentions {option} (a line in the README's options table is enough)"
        );
    }
}

/// The code blocks whose fence follows a `RUNS_IN_TESTS` line in `text`
/// (the file `path`), with the line number of their fence.
fn runnable_blocks(path: &str, text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != RUNS_IN_TESTS {
            continue;
        }
        let fence = lines.get(i + 1).copied().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "{path} line {}: {RUNS_IN_TESTS} is not right before a code fence",
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
fn the_docs_marked_examples_run() {
    let blocks: Vec<(String, usize, String)> = user_docs()
        .into_iter()
        .flat_map(|(path, text)| {
            runnable_blocks(&path, &text)
                .into_iter()
                .map(move |(line, block)| (path.clone(), line, block))
        })
        .collect();
    assert!(blocks.len() >= 3, "only {} marked blocks", blocks.len());
    assert!(
        blocks.iter().any(|(path, ..)| path == "README.md"),
        "no marked block in the README"
    );
    // `redlock-run` in the examples is the binary under test.
    let bin_dir = Path::new(bin()).parent().expect("the binary's directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .expect("PATH");
    for (file, line, block) in blocks {
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
            "the block of {file} at line {line} failed:\n{block}\n{out:?}"
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

/// `text` without its fenced code blocks and inline code spans, where a
/// `[...](...)` is not a link; each kept line with its number.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut in_fence = false;
    let mut kept = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Every other run between backticks is a code span.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        kept.push((i + 1, prose));
    }
    kept
}

/// The anchors GitHub makes for the headings of a Markdown `text`:
/// lower case, punctuation other than `-` and `_` dropped, spaces made
/// `-`, and `-1`, `-2` ... appended to repeats.
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !in_fence) else {
            continue;
        };
        let title = heading.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .trim_end_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || ['-', '_', ' '].contains(c))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while !anchors.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
    }
    anchors
}

/// The relative link targets in a Markdown `text` (inline links and
/// reference definitions; not URLs with a scheme), with their line.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    for (line, prose) in prose_lines(text) {
        let mut targets: Vec<&str> = prose
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split_once(')').map(|(target, _)| target))
            .collect();
        if let Some((_, target)) = prose
            .trim_start()
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("]: "))
        {
            targets.push(target);
        }
        for target in targets {
            // A title after the target: `[x](path "title")`.
            let target = target.split_whitespace().next().unwrap_or_default();
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links.push((line, target.to_string()));
        }
    }
    links
}

#[test]
fn every_relative_link_in_the_docs_leads_somewhere() {
    let root = source_root();
    let mut files = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string()];
    files.extend(docs_pages());
    let mut broken = Vec::new();
    let mut count = 0;
    for file in &files {
        let text = source_file(file);
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        for (line, target) in relative_links(&text) {
            count += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let linked = if path.is_empty() {
                Path::new(file).to_path_buf()
            } else {
                dir.join(path)
            };
            let full = root.join(&linked);
            if !full.exists() {
                broken.push(format!(
                    "{file}:{line}: {target}: no such file {}",
                    linked.display()
                ));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            let heads = std::fs::read_to_string(&full)
                .map(|t| heading_anchors(&t))
                .unwrap_or_default();
            if !heads.contains(anchor) {
                broken.push(format!(
                    "{file}:{line}: {target}: no heading #{anchor} in {} (it has {heads:?})",
                    linked.display()
                ));
            }
        }
    }
    assert!(
        count >= 20,
        "only {count} relative links found: is the parser blind?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn github_anchors_are_made_as_github_makes_them() {
    let anchors = heading_anchors(
        "# Safety model\n## Why `--replicas auto` is the default here\n```\n# not a heading\n```\n## Notes\n## Notes\n#hashtag\n",
    );
    let expected: BTreeSet<String> = [
        "safety-model",
        "why---replicas-auto-is-the-default-here",
        "notes",
        "notes-1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(anchors, expected);
    let links = relative_links(
        "see [a](docs/a.md#x) and `[not](b.md)`, [web](https://x.org)\n```\n[c](c.md)\n```\n[ref]: d.md\n",
    );
    assert_eq!(
        links,
        vec![(1, "docs/a.md#x".to_string()), (5, "d.md".to_string())]
    );
}

/// The numbers the docs show right after `fence` (`fence 42`, `"fence":42`,
/// `last fence 7`), with where they are.
fn fences_shown(text: &str) -> Vec<(usize, u64)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("fence") {
        let rest = text[at + "fence".len()..].trim_start_matches(['"', ':', ' ']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = rest[digits.len()..].chars().next();
        let word_ends = after.is_none_or(|c| !c.is_alphanumeric() && c != '.');
        if let (Ok(n), true) = (digits.parse::<u64>(), word_ends) {
            found.push((at, n));
        }
    }
    found
}

/// Issue 36, item 15: a fence is a 64-bit number seeded from the server's
/// clock in microseconds. What a job gets is past 2^31, the docs show
/// such values (never `fence 42`), and the SQL recipe keeps it in BIGINT.
#[test]
fn fences_are_shown_as_they_are_and_stored_in_64_bits() {
    let server = RedisServer::start();
    let out = run_with_timeout(&mut server.job("fenced").line("echo $REDLOCK_FENCE"), T);
    assert_eq!(out.code, Some(0), "{out:?}");
    let fence: i64 = out.stdout.trim().parse().expect("an integer");
    assert!(fence > i64::from(i32::MAX), "an INT would not hold {fence}");
    assert_eq!(fence.to_string().len(), 16, "{fence}");

    let mut pages = user_docs();
    pages.push(("the man page".into(), man_page_text()));
    for (path, text) in &pages {
        for (at, shown) in fences_shown(text) {
            // 0: never acquired; else a real fence has 16 digits.
            assert!(
                shown == 0 || shown >= 1_000_000_000_000_000,
                "{path} shows a fence of {shown}, not one a user sees: ...{}...",
                &text[at.saturating_sub(60)..(at + 40).min(text.len())]
            );
        }
    }
    let safety = source_file("docs/safety.md");
    assert!(safety.contains("fence bigint"), "the recipe's table");
    assert!(safety.contains("**64-bit**"), "docs/safety.md says it");
    assert!(
        man_page_text().contains("64-bit integer"),
        "the man page says it"
    );
}
