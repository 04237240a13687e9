//! The committed man page and completion scripts are exactly what
//! `redlock-run generate` prints, and they load in their tools.
//!
//! After a CLI change, refresh them with
//! `REDLOCK_RUN_BLESS=1 cargo test --test integration generated` and commit the result.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);
const REFRESH: &str = "REDLOCK_RUN_BLESS=1 cargo test --test integration generated";

/// `generate` argument -> committed file.
const ARTIFACTS: [(&str, &str); 6] = [
    ("man", "man/redlock-run.1"),
    ("bash", "completions/redlock-run.bash"),
    ("zsh", "completions/_redlock-run"),
    ("fish", "completions/redlock-run.fish"),
    ("elvish", "completions/redlock-run.elv"),
    ("powershell", "completions/_redlock-run.ps1"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(what: &str) -> String {
    // A broken REDIS_URL proves that generate never looks at Redis settings.
    let out = run_with_timeout(
        redlock_bare()
            .args(["generate", what])
            .env("REDIS_URL", "not a url"),
        TIMEOUT,
    );
    assert_eq!(
        out.code,
        Some(0),
        "redlock-run generate {what} failed: {}",
        out.stderr
    );
    assert_eq!(out.stderr, "", "generate {what} printed on stderr");
    assert!(!out.stdout.is_empty(), "generate {what} printed nothing");
    out.stdout
}

/// Compare with the committed file; with REDLOCK_RUN_BLESS=1, rewrite it.
fn check(what: &str) {
    let path = ARTIFACTS
        .iter()
        .find(|(arg, _)| *arg == what)
        .map(|(_, path)| *path)
        .expect("artifact in table");
    let fresh = generate(what);
    let file = root().join(path);
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    if committed == fresh {
        return;
    }
    if std::env::var_os("REDLOCK_RUN_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(file.parent().expect("has a parent")).expect("create dir");
        std::fs::write(&file, &fresh).unwrap_or_else(|e| panic!("write {path}: {e}"));
        eprintln!("wrote {path}");
        return;
    }
    let first_diff = committed
        .lines()
        .zip(fresh.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}:\n  committed: {a}\n  generated: {b}", i + 1))
        .unwrap_or_else(|| {
            format!(
                "lengths differ: {} committed lines, {} generated",
                committed.lines().count(),
                fresh.lines().count()
            )
        });
    panic!(
        "{path} is out of date (or missing); run `{REFRESH}` and commit the result.\n{first_diff}"
    );
}

#[test]
fn man_page_is_up_to_date() {
    check("man");
}

#[test]
fn bash_completion_is_up_to_date() {
    check("bash");
}

#[test]
fn zsh_completion_is_up_to_date() {
    check("zsh");
}

#[test]
fn fish_completion_is_up_to_date() {
    check("fish");
}

#[test]
fn elvish_completion_is_up_to_date() {
    check("elvish");
}

#[test]
fn powershell_completion_is_up_to_date() {
    check("powershell");
}

#[test]
fn no_stray_generated_files() {
    for dir in ["man", "completions"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
            continue; // not generated yet: the up-to-date tests say so
        };
        for entry in entries {
            let name = format!(
                "{dir}/{}",
                entry.expect("dir entry").file_name().to_string_lossy()
            );
            assert!(
                ARTIFACTS.iter().any(|(_, path)| *path == name),
                "{name} is not made by `redlock-run generate`: delete it, or add it to ARTIFACTS \
                 in tests/generated.rs"
            );
        }
    }
}

#[test]
fn generate_rejects_an_unknown_kind() {
    // `events` was a hidden kind once; the docs' table is checked in a
    // unit test now.
    for kind in ["tcsh", "events"] {
        let out = run_with_timeout(redlock_bare().args(["generate", kind]), TIMEOUT);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert!(out.stderr.contains(kind), "{}", out.stderr);
        assert_eq!(out.stdout, "");
    }
}

#[test]
fn generate_shows_only_what_it_takes() {
    let help = run(redlock_bare().args(["generate", "--help"]));
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    for connection in [
        "--redis",
        "--prefix",
        "--tls-ca",
        "--log-format",
        "--verbose",
    ] {
        assert!(
            !help.stdout.contains(connection),
            "{connection}:\n{}",
            help.stdout
        );
    }
    // What completion offers after `generate`: its kinds and --help.
    let bash = generate("bash");
    let offered = bash
        .split("redlock__run__subcmd__generate)")
        .nth(1)
        .and_then(|arm| arm.split("opts=\"").nth(1))
        .and_then(|opts| opts.split('"').next())
        .expect("the bash arm of generate");
    assert_eq!(offered, "-h --help man bash zsh fish elvish powershell");
    let fish = generate("fish");
    let generate_lines: Vec<&str> = fish
        .lines()
        .filter(|l| l.contains("using_subcommand generate"))
        .collect();
    assert!(!generate_lines.is_empty());
    for line in generate_lines {
        assert!(
            !line.contains("-l redis") && !line.contains("events"),
            "{line}"
        );
    }
    // Before the subcommand's name, as everywhere, they are accepted.
    let out = run(redlock_bare().args(["--redis", "redis://127.0.0.1:1", "generate", "man"]));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// Some(program) if it is installed (see `have_tool`).
fn tool(program: &str) -> Option<&str> {
    let package = match program {
        "groff" => "groff-base",
        "man" => "man-db",
        other => other,
    };
    have_tool(program, package).then_some(program)
}

fn run(cmd: &mut Command) -> Output {
    run_with_timeout(cmd, TIMEOUT)
}

/// groff's text output without bold or underline, every warning on stderr.
fn groff(page: &Path, width: u32) -> Output {
    run(Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-P-cbu"])
        .arg(format!("-rLL={width}n"))
        .arg(page))
}

#[test]
fn man_page_renders_without_warnings() {
    // The page must exist in its fresh form for this test to mean anything.
    let page = generate("man");
    let Some(_) = tool("groff") else { return };
    let file = TestDir::new();
    std::fs::write(file.file("redlock-run.1"), &page).expect("write page");
    for width in [60, 80, 120] {
        let out = groff(&file.file("redlock-run.1"), width);
        assert_eq!(out.code, Some(0), "groff failed: {}", out.stderr);
        assert_eq!(out.stderr, "", "groff warnings at width {width}");
        // Hyphenation at a line end uses U+2010.
        let text = out.stdout.replace('\u{2010}', "-");
        for heading in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "COMMANDS",
            "EXIT STATUS",
            "ENVIRONMENT",
            "DATA IN REDIS",
            "SAFETY",
            "EXAMPLES",
            "SEE ALSO",
        ] {
            assert!(
                text.lines().any(|l| l == heading),
                "no {heading} section in the rendered page"
            );
        }
        for needle in [
            "REDLOCK_REDIS_URL",
            "REDIS_URL",
            "REDLOCK_KEY",
            "REDLOCK_TOKEN",
            "REDLOCK_FENCE",
            "--tls-ca",
            "--tls-cert",
            "--tls-key",
            "force-release",
            "-n -E 0",
        ] {
            assert!(text.contains(needle), "{needle} missing from the man page");
        }
        for code in ["75", "69", "70", "126 / 127", "128 + N"] {
            assert!(text.contains(code), "exit status {code} missing");
        }
    }
}

#[test]
fn man_page_shows_with_man() {
    let Some(_) = tool("man") else { return };
    let file = TestDir::new();
    std::fs::write(file.file("redlock-run.1"), generate("man")).expect("write page");
    let out = run(Command::new("man")
        .arg("-l")
        .arg(file.file("redlock-run.1"))
        .env("MANWIDTH", "80")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat"));
    assert_eq!(out.code, Some(0), "man -l failed: {}", out.stderr);
    assert_eq!(out.stderr, "", "man -l printed warnings");
    assert!(out.stdout.contains("EXIT STATUS"), "{}", out.stdout);
}

/// The generated script in a scratch dir: checked even before the committed
/// copy is refreshed.
fn completion_file(what: &str) -> (TestDir, PathBuf) {
    let dir = TestDir::new();
    let name = ARTIFACTS
        .iter()
        .find(|(arg, _)| *arg == what)
        .map(|(_, path)| Path::new(path).file_name().expect("file name").to_owned())
        .expect("artifact in table");
    let path = dir.path().join(name);
    std::fs::write(&path, generate(what)).expect("write completion");
    (dir, path)
}

const SUBCOMMANDS: [&str; 4] = ["status", "list", "force-release", "generate"];

/// What bash offers for the words of `line` (the last one being completed).
fn bash_offers(script: &Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let text = std::fs::read_to_string(script).expect("read script");
    let function = text
        .split_whitespace()
        .skip_while(|w| *w != "-F")
        .nth(1)
        .expect("a `complete -F FUNCTION` line");
    let program = format!(
        r#"source "$1" || exit 9
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE="{line}"
COMP_POINT=${{#COMP_LINE}}
{function} redlock-run "{cur}" "{prev}"
printf '%s\n' "${{COMPREPLY[@]}}""#,
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
        cur = words[words.len() - 1],
        prev = words[words.len().saturating_sub(2)],
    );
    let out = run(Command::new("bash")
        .args(["-c", &program, "bash"])
        .arg(script));
    assert_eq!(out.code, Some(0), "bash completion failed: {}", out.stderr);
    out.stdout.lines().map(|l| l.trim().to_string()).collect()
}

#[test]
fn bash_completion_loads_and_offers_options_and_subcommands() {
    let Some(bash) = tool("bash") else { return };
    let (_dir, script) = completion_file("bash");
    let out = run(Command::new(bash).arg("-n").arg(&script));
    assert_eq!(out.code, Some(0), "bash -n: {}", out.stderr);

    let offered = bash_offers(&script, "redlock-run --k");
    assert!(offered.iter().any(|o| o == "--key"), "{offered:?}");
    assert!(offered.iter().any(|o| o == "--kill-after"), "{offered:?}");
    let offered = bash_offers(&script, "redlock-run --tls");
    for tls in ["--tls-ca", "--tls-cert", "--tls-key"] {
        assert!(offered.iter().any(|o| o == tls), "{tls} not in {offered:?}");
    }
    let offered = bash_offers(&script, "redlock-run ");
    for sub in SUBCOMMANDS {
        assert!(offered.iter().any(|o| o == sub), "{sub} not in {offered:?}");
    }
    let offered = bash_offers(&script, "redlock-run status --j");
    assert_eq!(offered, ["--json"]);
    let offered = bash_offers(&script, "redlock-run generate ");
    for kind in ["man", "bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(
            offered.iter().any(|o| o == kind),
            "{kind} not in {offered:?}"
        );
    }
    assert!(
        !offered.iter().any(|o| o == "events" || o == "--redis"),
        "{offered:?}"
    );
}

#[test]
fn zsh_completion_loads_and_names_options_and_subcommands() {
    let (_dir, script) = completion_file("zsh");
    let text = std::fs::read_to_string(&script).expect("read");
    assert!(text.starts_with("#compdef redlock-run"), "{}", &text[..40]);
    assert!(text.contains("--key="), "no --key in the zsh completion");
    for sub in SUBCOMMANDS {
        assert!(text.contains(&format!("'{sub}:")), "{sub} missing");
    }
    let Some(zsh) = tool("zsh") else { return };
    let out = run(Command::new(zsh).arg("-n").arg(&script));
    assert_eq!(out.code, Some(0), "zsh -n: {}", out.stderr);
    // Load it for real: compinit, then the completion function must exist.
    let dir = script.parent().expect("dir").display().to_string();
    let program = format!(
        "fpath=({dir} $fpath); autoload -Uz compinit; compinit -u -d {dir}/zcompdump; \
         autoload -Uz _redlock-run; whence -w _redlock-run"
    );
    let out = run(Command::new(zsh).args(["-f", "-c", &program]));
    assert_eq!(out.code, Some(0), "zsh could not load it: {}", out.stderr);
    assert!(out.stdout.contains("function"), "{}", out.stdout);
}

#[test]
fn fish_completion_loads_and_offers_options_and_subcommands() {
    let (_dir, script) = completion_file("fish");
    let Some(fish) = tool("fish") else { return };
    let out = run(Command::new(fish).arg("--no-execute").arg(&script));
    assert_eq!(out.code, Some(0), "fish --no-execute: {}", out.stderr);
    let offers = |line: &str| {
        let program = format!("source {}; complete -C '{line}'", script.display());
        let out = run(Command::new(fish).args(["--no-config", "-c", &program]));
        assert_eq!(out.code, Some(0), "fish: {}", out.stderr);
        out.stdout
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    let offered = offers("redlock-run --k");
    assert!(offered.iter().any(|o| o == "--key"), "{offered:?}");
    let offered = offers("redlock-run ");
    for sub in SUBCOMMANDS {
        assert!(offered.iter().any(|o| o == sub), "{sub} not in {offered:?}");
    }
}

#[test]
fn other_completions_name_options_and_subcommands() {
    for what in ["elvish", "powershell"] {
        let text = generate(what);
        assert!(text.contains("--key"), "no --key in the {what} completion");
        for sub in SUBCOMMANDS {
            assert!(
                text.contains(sub),
                "{sub} missing from the {what} completion"
            );
        }
    }
}

#[test]
fn short_and_long_help() {
    let short = run(redlock_bare().arg("-h"));
    let long = run(redlock_bare().arg("--help"));
    assert_eq!(short.code, Some(0), "{}", short.stderr);
    assert_eq!(long.code, Some(0), "{}", long.stderr);
    // -h keeps what a first user needs; TLS and the rest are in --help.
    assert!(long.stdout.contains("--tls-ca"), "{}", long.stdout);
    for out in [&short, &long] {
        for needle in ["--key", "--ttl", "--redis", "status", "generate"] {
            assert!(
                out.stdout.contains(needle),
                "{needle} missing:\n{}",
                out.stdout
            );
        }
    }
    assert!(
        long.stdout.contains("Examples:") && long.stdout.contains("-n -E 0"),
        "long help has no examples:\n{}",
        long.stdout
    );
    assert!(
        !short.stdout.contains("Examples:"),
        "-h should stay short:\n{}",
        short.stdout
    );
    assert!(short.stdout.len() < long.stdout.len());
    let sub = run(redlock_bare().args(["generate", "--help"]));
    assert_eq!(sub.code, Some(0), "{}", sub.stderr);
    assert!(sub.stdout.contains("powershell"), "{}", sub.stdout);
}

/// The long help as a terminal `width` columns wide shows it.
fn help_at(width: usize) -> String {
    let out = run(redlock_bare()
        .arg("--help")
        .env("COLUMNS", width.to_string()));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stdout
}

/// The lines of the part of `help` under `heading` (to the next heading).
fn part<'a>(help: &'a str, heading: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != heading)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

#[test]
fn long_help_wraps_with_its_indentation_at_80_and_60_columns() {
    for width in [80, 60] {
        let help = help_at(width);
        let long: Vec<&str> = help.lines().filter(|l| l.chars().count() > width).collect();
        assert!(long.is_empty(), "lines over {width} columns: {long:#?}");
        // Exit status: a code column, the text beside it; wrapped text
        // stays in the text column.
        let rows = part(&help, "Exit status:");
        assert!(rows.len() >= 13, "{help}");
        assert!(
            rows[0].starts_with("  COMMAND's own  COMMAND ran"),
            "{}",
            rows[0]
        );
        let column = rows[0].find("COMMAND ran").expect("the text column");
        for row in &rows {
            let indent = row.len() - row.trim_start().len();
            assert!(
                indent == 2 || indent == column,
                "{width} columns: an exit-status line out of its columns: {row:?}"
            );
            assert!(row.len() > column, "{width} columns: no text: {row:?}");
        }
        assert!(rows.iter().any(|r| r.starts_with(&" ".repeat(column))));
        // Examples: comments and commands at 2, their continuations deeper.
        let examples = part(&help, "Examples:");
        assert!(examples.len() >= 8, "{help}");
        for line in examples.iter().filter(|l| !l.is_empty()) {
            assert!(line.starts_with("  "), "{width} columns: {line:?}");
        }
        if width == 60 {
            assert!(
                examples.iter().any(|l| l.starts_with("      ")),
                "the cron example does not wrap at 60 columns, or wraps unindented:\n{}",
                examples.join("\n")
            );
        }
        // Defaults: on a line of their own, as clap puts its own.
        for line in help.lines().filter(|l| l.contains("[default:")) {
            assert!(
                line.trim_start().starts_with("[default:"),
                "{width} columns: a default at the end of a text line: {line:?}"
            );
        }
    }
}
