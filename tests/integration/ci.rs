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

/// What `status KEY --json` and `status KEY` print while a run holds KEY,
/// asked by its own COMMAND (so the lock is surely held): the JSON line
/// and the text line.
fn status_while_held(
    server: &RedisServer,
    key: &str,
    run_args: &[&str],
    env: &[(&str, &str)],
) -> (serde_json::Value, String) {
    let status = format!(
        "'{bin}' --redis '{url}' status '{key}' --json; '{bin}' --redis '{url}' status '{key}'",
        bin = bin(),
        url = server.url()
    );
    let mut job = server.job(key).args(run_args);
    for (name, value) in env {
        job = job.env(name, value);
    }
    let out = run_with_timeout(&mut job.sh(status), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.stdout.lines();
    let json = serde_json::from_str(lines.next().expect("a JSON line")).expect("JSON");
    (json, lines.next().expect("a text line").to_string())
}

/// What a run is given (a name, its options, its environment) and the
/// label it should carry.
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    &'a [(&'a str, &'a str)],
    Option<&'a str>,
);

#[test]
fn the_ci_job_url_is_the_default_label() {
    let server = RedisServer::start();
    let github = [
        ("GITHUB_SERVER_URL", "https://github.com"),
        ("GITHUB_REPOSITORY", "acme/shop"),
        ("GITHUB_RUN_ID", "4242"),
    ];
    let gitlab = [(
        "CI_JOB_URL",
        "https://gitlab.example.com/acme/shop/-/jobs/99",
    )];
    let jenkins = [("BUILD_URL", "https://jenkins.example.com/job/shop/12/")];
    let runs = "https://github.com/acme/shop/actions/runs/4242";
    let cases: [Case; 7] = [
        ("github", &[], &github, Some(runs)),
        ("gitlab", &[], &gitlab, Some(gitlab[0].1)),
        ("jenkins", &[], &jenkins, Some(jenkins[0].1)),
        (
            "variable",
            &[],
            &[("REDLOCK_LABEL", "release 1.2"), gitlab[0]],
            Some("release 1.2"),
        ),
        (
            "option",
            &["--label", "hotfix"],
            &[("REDLOCK_LABEL", "release 1.2")],
            Some("hotfix"),
        ),
        ("none asked", &["--label", ""], &github, None),
        ("no CI", &[], &[], None),
    ];
    for (case, args, env, label) in cases {
        let (json, text) = status_while_held(&server, "deploy", args, env);
        assert_eq!(json["holder"]["label"].as_str(), label, "{case}: {json}");
        assert_eq!(json["label"].as_str(), label, "{case}: {json}");
        match label {
            Some(label) => assert!(
                text.contains(&format!(") [{label}] for ")),
                "{case}: {text}"
            ),
            None => assert!(!text.contains('['), "{case}: {text}"),
        }
    }
}

#[test]
fn busy_and_waiting_lines_and_the_line_of_waiters_show_labels() {
    let server = RedisServer::start();
    let dir = TestDir::new();
    let hold = Hold::new(&dir);
    let mut holder = hold.spawn(
        &mut server
            .job("deploy")
            .args(["--label", "deploy #7"])
            .sh(hold.script("")),
        LONG,
    );
    let busy = run_with_timeout(&mut server.job("deploy").args(["-n"]).exec(["true"]), LONG);
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert!(
        busy.stderr.contains(") [deploy #7] for ") && busy.stderr.contains("; giving up"),
        "{busy:?}"
    );
    let busy = run_with_timeout(
        &mut server
            .job("deploy")
            .args(["-n", "--log-format", "json"])
            .exec(["true"]),
        LONG,
    );
    let event: serde_json::Value =
        serde_json::from_str(busy.stderr.trim()).expect("one JSON event");
    assert_eq!(event["event"], "busy", "{busy:?}");
    assert_eq!(event["label"], "deploy #7", "{busy:?}");

    let mut waiter = spawn_waiting(
        &mut server
            .job("deploy")
            .args(["--label", "pipeline 8", "-v", "--log-format", "json"])
            .exec(["true"]),
        LONG,
    );
    let waiting: serde_json::Value = serde_json::from_str(
        waiter
            .stderr_now()
            .lines()
            .find(|l| l.contains("\"waiting\""))
            .expect("a waiting event"),
    )
    .expect("JSON");
    assert_eq!(waiting["label"], "deploy #7", "{waiting}");
    let in_line = || {
        let out = run_with_timeout(
            redlock(&server.url()).args(["status", "deploy", "--json"]),
            LONG,
        );
        serde_json::from_str::<serde_json::Value>(out.stdout.trim()).expect("JSON")
    };
    assert!(
        wait_until(LONG, || in_line()["waiters"][0]["label"] == "pipeline 8"),
        "{}",
        in_line()
    );
    let text = run_with_timeout(redlock(&server.url()).args(["status", "deploy"]), LONG);
    assert!(
        text.stdout.contains("[deploy #7]") && text.stdout.contains(") [pipeline 8] for "),
        "{text:?}"
    );
    hold.go();
    assert_eq!(holder.wait_timeout(LONG).code, Some(0));
    assert_eq!(waiter.wait_timeout(LONG).code, Some(0));
}

#[test]
fn labels_are_checked_when_given_and_escaped_when_shown() {
    let server = RedisServer::start();
    let out = run_with_timeout(
        &mut server
            .job("k")
            .args(["--label", "a\u{1b}[2Jb"])
            .exec(["true"]),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("'--label <TEXT>'"), "{out:?}");
    let out = run_with_timeout(
        &mut server.job("k").env("REDLOCK_LABEL", "a\nb").exec(["true"]),
        LONG,
    );
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("'$REDLOCK_LABEL'"), "{out:?}");

    // A record with a terminal escape in its label, and one of an older
    // version, without a label.
    let mut conn = server.conn();
    for (key, label) in [("odd", Some("\u{1b}[31mred")), ("old", None)] {
        let lock = format!("redlock:{{{key}}}");
        let _: () = redis::cmd("SET")
            .arg(&lock)
            .arg("t1")
            .arg("PX")
            .arg(60_000)
            .query(&mut conn)
            .unwrap();
        let mut hset = redis::cmd("HSET");
        hset.arg(format!("{lock}:holder"))
            .arg(&["host", "web1", "pid", "42", "user", "ci"][..]);
        if let Some(label) = label {
            hset.arg(&["label", label][..]);
        }
        let _: () = hset.query(&mut conn).unwrap();
    }
    let status = |key: &str| {
        let out = run_with_timeout(redlock(&server.url()).args(["status", key]), LONG);
        assert_eq!(out.code, Some(0), "{out:?}");
        out.stdout
    };
    let odd = status("odd");
    assert!(
        odd.starts_with("odd  held by web1 pid 42 (ci) [\\u{1b}[31mred], expires in "),
        "{odd}"
    );
    assert!(!odd.contains('\u{1b}'), "{odd}");
    let old = status("old");
    assert!(
        old.starts_with("old  held by web1 pid 42 (ci), expires in "),
        "{old}"
    );
    // The table escapes it too, and shows "-" for the older record.
    let out = run_with_timeout(redlock(&server.url()).args(["status", "odd", "old"]), LONG);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains('\u{1b}'), "{out:?}");
    let rows: Vec<&str> = out.stdout.lines().collect();
    assert!(rows[1].contains("  \\u{1b}[31mred  "), "{out:?}");
    assert!(rows[2].contains("(ci)  -  "), "{out:?}");
    let out = run_with_timeout(
        redlock(&server.url()).args(["status", "odd", "old", "--json"]),
        LONG,
    );
    let lines = json_lines(&out);
    assert_eq!(lines[0]["holder"]["label"], "\u{1b}[31mred");
    assert!(lines[1]["holder"].get("label").is_none(), "{out:?}");
    assert!(lines[1].get("label").is_none(), "{out:?}");
}
