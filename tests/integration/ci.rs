//! The CI snippets of docs/queues.md for `--queue newest-wins`: a pipeline
//! replaced in line (exit 79) does not fail, every other failure does.
//! GitHub's step runs here as its runner runs it (`bash -e`), with
//! `$GITHUB_OUTPUT`; GitLab's `allow_failure` names the same code.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

const LONG: Duration = Duration::from_secs(30);

/// The part of docs/queues.md about CI pipelines.
fn ci_part() -> String {
    let page = source_file("docs/queues.md");
    let start = page
        .find("### A replaced pipeline in CI")
        .expect("docs/queues.md has the CI snippets");
    let rest = &page[start..];
    rest[..rest[4..].find("\n### ").map_or(rest.len(), |i| i + 4)].to_string()
}

/// The `run: |` script of the GitHub step with `id: deploy`.
fn github_script(part: &str) -> String {
    let lines: Vec<&str> = part
        .lines()
        .skip_while(|l| l.trim() != "id: deploy")
        .skip_while(|l| l.trim() != "run: |")
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| &l[4..])
        .collect();
    assert!(lines.len() >= 2, "no run script in:\n{part}");
    lines.join("\n") + "\n"
}

/// The exit code the README's table gives a waiter replaced in line.
fn replaced_code() -> String {
    let readme = readme_text();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| 79 |") || (l.starts_with('|') && l.contains("newest-wins:")))
        .expect("an exit-code row for newest-wins");
    row.split('|').nth(1).unwrap_or_default().trim().to_string()
}

/// GitHub's step script, run as its runner does, in `dir`.
fn github_step(script: &str, url: &str, dir: &TestDir) -> Command {
    let bin_dir = Path::new(bin()).parent().expect("the binary's dir");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .expect("PATH");
    let mut cmd = Command::new("bash");
    cmd.args([
        "--noprofile",
        "--norc",
        "-e",
        "-o",
        "pipefail",
        "-c",
        script,
    ])
    .current_dir(dir.path())
    .env("PATH", path)
    .env("REDLOCK_REDIS_URL", url)
    .env("GITHUB_OUTPUT", dir.file("github_output"));
    cmd
}

#[test]
fn a_pipeline_replaced_in_line_passes_and_other_failures_fail() {
    let part = ci_part();
    let code = replaced_code();
    assert_eq!(code, "79");
    assert!(
        part.contains("exit_codes: [79]"),
        "GitLab's allow_failure:\n{part}"
    );
    assert!(
        part.contains("outputs.exit != '79'"),
        "GitHub's check:\n{part}"
    );
    let script = github_script(&part);

    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(&mut server.job("deploy-prod").sh(hold.script("")), LONG);
    // An older pipeline waits in line, then a newer one replaces it.
    let mut older = spawn_piped(&mut github_step(&script, &server.url(), &dir));
    let mut conn = server.conn();
    let in_line = || -> i64 {
        redis::cmd("ZCARD")
            .arg("redlock:{deploy-prod}:waiters")
            .query(&mut server.conn())
            .unwrap_or(0)
    };
    assert!(
        wait_until(LONG, || in_line() == 1),
        "the older never stood in line"
    );
    let mut newer = spawn_piped(redlock(&server.url()).args([
        "-k",
        "deploy-prod",
        "--queue",
        "newest-wins",
        "--",
        "true",
    ]));
    let out = older.wait_timeout(LONG);
    assert_eq!(out.code, Some(79), "the older step: {out:?}");
    let output = dir.read("github_output").unwrap_or_default();
    assert_eq!(output, "exit=79\n", "what the next step's `if` reads");
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    assert_eq!(newer.wait_timeout(LONG).code, Some(0));
    assert!(!redis::cmd("EXISTS")
        .arg("redlock:{deploy-prod}")
        .query::<bool>(&mut conn)
        .unwrap());

    // A deploy that fails is still a failure: its code reaches the `if`.
    std::fs::write(dir.file("deploy.sh"), "#!/bin/sh\nexit 3\n").unwrap();
    let run = Command::new("chmod")
        .args(["+x", "deploy.sh"])
        .current_dir(dir.path())
        .status();
    assert!(run.is_ok_and(|s| s.success()));
    std::fs::remove_file(dir.file("github_output")).unwrap();
    let out = run_with_timeout(&mut github_step(&script, &server.url(), &dir), LONG);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert_eq!(dir.read("github_output").as_deref(), Some("exit=3\n"));
}
