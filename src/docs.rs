//! `generate`: the man page and the shell completions, made from the same
//! clap definition the binary parses.
//!
//! The output depends on nothing but the argument (no date, no argv[0], no
//! environment), so the committed copies in `man/` and `completions/` can
//! be checked byte for byte by `tests/generated.rs`.

use std::io::Write;

use anyhow::Context;

use clap::{Arg, ArgAction, CommandFactory};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

use crate::cli::{Cli, Doc};
use crate::config::DEFAULT_URL;
use crate::exit::{Exit, Failure};

/// The name completions register for: a literal, never argv[0].
const BIN: &str = "redlock-run";

/// Write `what` to stdout.
pub fn print(what: Doc) -> Result<Exit, Failure> {
    let text = render(what).context("cannot render the page")?;
    crate::log::to_stdout(&text).map_err(|e| Failure {
        exit: Exit::Internal,
        error: anyhow::anyhow!("cannot write to stdout: {e}"),
    })?;
    Ok(Exit::Success)
}

/// The bytes `generate what` prints.
pub fn render(what: Doc) -> std::io::Result<Vec<u8>> {
    let shell = match what {
        Doc::Man => return man(),
        Doc::Events => return Ok(crate::log::Ev::markdown().into_bytes()),
        Doc::Bash => Shell::Bash,
        Doc::Zsh => Shell::Zsh,
        Doc::Fish => Shell::Fish,
        Doc::Elvish => Shell::Elvish,
        Doc::Powershell => Shell::PowerShell,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), BIN, &mut out);
    if shell == Shell::Bash {
        out = fix_bash_states(out);
    }
    Ok(out)
}

/// clap_complete 4.6 spells a subcommand's state `redlock__run__subcmd__status`
/// where it sets it, but `redlock__subcmd__run__subcmd__status` in the case
/// arm that should match it (clap-rs/clap#6421: any bin name with a hyphen),
/// so nothing after a subcommand completed. Spell the arms like the loop.
/// A no-op once clap_complete is fixed; tests/generated.rs drives bash to
/// check that `generate <TAB>` completes.
fn fix_bash_states(script: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8_lossy(&script);
    text.replace("redlock__subcmd__run__subcmd__", "redlock__run__subcmd__")
        .into_bytes()
}

/// One page: clap_mangen's title, NAME, SYNOPSIS, DESCRIPTION and OPTIONS,
/// then our own sections, then VERSION. Not `Man::render`: it would put the
/// long help's examples under "EXTRA" and point at per-subcommand pages.
fn man() -> std::io::Result<Vec<u8>> {
    let page = Man::new(Cli::command());
    let mut parts: Vec<Vec<u8>> = Vec::new();
    type Section = fn(&Man, &mut dyn Write) -> std::io::Result<()>;
    let head: [Section; 2] = [Man::render_title, Man::render_name_section];
    for section in head {
        let mut buf = Vec::new();
        section(&page, &mut buf)?;
        parts.push(buf);
    }
    let mut ours = Roff::new();
    synopsis_section(&mut ours);
    parts.push(ours.render().into_bytes());
    let mut description = Vec::new();
    page.render_description_section(&mut description)?;
    parts.push(description);
    let mut ours = Roff::new();
    life_cycle(&mut ours);
    parts.push(ours.render().into_bytes());
    let mut options = Vec::new();
    page.render_options_section(&mut options)?;
    parts.push(options);

    let mut ours = Roff::new();
    commands(&mut ours);
    exit_status(&mut ours);
    events(&mut ours);
    environment(&mut ours);
    data_in_redis(&mut ours);
    tls(&mut ours);
    permissions(&mut ours);
    safety(&mut ours);
    examples(&mut ours);
    parts.push(ours.render().into_bytes());

    let mut version = Vec::new();
    page.render_version_section(&mut version)?;
    parts.push(version);

    let mut see_also = Roff::new();
    section(&mut see_also, "SEE ALSO");
    see_also.text([
        bold("flock"),
        roman("(1), "),
        bold("timeout"),
        roman("(1), "),
        bold("crontab"),
        roman("(5), "),
        bold("systemd.timer"),
        roman("(5), "),
        bold("redis-server"),
        roman("(1), "),
        bold("redis-cli"),
        roman("(1)"),
    ]);
    para(
        &mut see_also,
        "Distributed locks with Redis (the Redlock algorithm):",
    );
    verbatim(
        &mut see_also,
        &["https://redis.io/docs/latest/develop/use/patterns/distributed-locks/"],
    );
    para(
        &mut see_also,
        "Martin Kleppmann, How to do distributed locking (on fencing tokens):",
    );
    verbatim(
        &mut see_also,
        &["https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html"],
    );
    parts.push(see_also.render().into_bytes());

    // Every rendered piece repeats roff's apostrophe preamble; keep the first.
    let preamble = Roff::new().render().into_bytes();
    let mut page = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let body = match part.strip_prefix(preamble.as_slice()) {
            Some(body) if i > 0 => body,
            _ => part.as_slice(),
        };
        page.extend_from_slice(body);
    }
    Ok(page)
}

fn section(r: &mut Roff, name: &str) {
    r.control("SH", [name]);
}

fn para(r: &mut Roff, text: &str) {
    r.control("PP", []);
    r.text([roman(text)]);
}

/// A tagged paragraph: `term` in bold, then `text`.
fn item(r: &mut Roff, term: impl Into<Vec<Inline>>, text: &str) {
    r.control("TP", []);
    r.text(term);
    r.text([roman(text)]);
}

/// Lines shown verbatim, indented.
fn verbatim(r: &mut Roff, lines: &[impl AsRef<str>]) {
    r.control("PP", []);
    r.control("RS", ["4"]);
    r.control("nf", []);
    for line in lines {
        r.text([roman(line.as_ref())]);
    }
    r.control("fi", []);
    r.control("RE", []);
}

/// The invocations of the contract, rather than clap_mangen's flag soup.
fn synopsis_section(r: &mut Roff) {
    section(r, "SYNOPSIS");
    let lines: [Vec<Inline>; 6] = [
        vec![
            bold(BIN),
            roman(" ["),
            italic("OPTIONS"),
            roman("] "),
            bold("--key"),
            roman(" "),
            italic("KEY"),
            roman(" "),
            bold("--"),
            roman(" "),
            italic("COMMAND"),
            roman(" ["),
            italic("ARG"),
            roman("...]"),
        ],
        vec![
            bold(BIN),
            roman(" ["),
            italic("OPTIONS"),
            roman("] "),
            bold("--key"),
            roman(" "),
            italic("KEY"),
            roman(" "),
            bold("-c"),
            roman(" "),
            italic("LINE"),
        ],
        vec![
            bold(BIN),
            roman(" "),
            bold("status"),
            roman(" "),
            italic("KEY"),
            roman("... ["),
            bold("--json"),
            roman("]"),
        ],
        vec![
            bold(BIN),
            roman(" "),
            bold("list"),
            roman(" ["),
            bold("--json"),
            roman("]"),
        ],
        vec![
            bold(BIN),
            roman(" "),
            bold("force-release"),
            roman(" "),
            italic("KEY"),
            roman(" ["),
            bold("--token"),
            roman(" "),
            italic("TOKEN"),
            roman("]"),
        ],
        vec![
            bold(BIN),
            roman(" "),
            bold("generate"),
            roman(" "),
            bold("man"),
            roman("|"),
            bold("bash"),
            roman("|"),
            bold("zsh"),
            roman("|"),
            bold("fish"),
            roman("|"),
            bold("elvish"),
            roman("|"),
            bold("powershell"),
        ],
    ];
    for (i, line) in lines.into_iter().enumerate() {
        if i > 0 {
            r.control("br", []);
        }
        r.text(line);
    }
}

/// The rest of DESCRIPTION: what happens, step by step.
fn life_cycle(r: &mut Roff) {
    para(r, "The lock's life cycle:");
    let steps: [(&str, &str); 7] = [
        (
            "1. Acquire.",
            "One Lua script sets the lock key to a fresh random token (SET NX PX with the TTL), \
             increments the key's fencing counter, and writes a holder record (host, pid, user, \
             command, time). If the lock is busy, redlock-run waits up to --wait, and wakes up \
             as soon as the holder releases. An unreachable Redis is not waited for: exit 69 \
             after the connection timeout. SIGINT, SIGTERM or SIGHUP while waiting stop \
             waiting; COMMAND never starts and nothing is left in Redis.",
        ),
        (
            "2. Run.",
            "COMMAND starts in its own process group with inherited standard input, output and \
             error, so a signal reaches every process of a pipeline; interactive programs keep \
             working when standard input is a terminal. COMMAND finds the lock in its \
             environment (see ENVIRONMENT).",
        ),
        (
            "3. Refresh.",
            "Every --refresh (a third of the TTL by default) the TTL is pushed forward, only if \
             the lock still holds our token (compare and PEXPIRE in one script). A refresh that \
             fails for a transient reason is retried quickly.",
        ),
        (
            "4. Lock lost.",
            "If a refresh finds the token gone or replaced, or refreshes keep failing until the \
             lock can no longer be shown to be valid, COMMAND's process group gets SIGTERM and, \
             --kill-after later, SIGKILL, timed so that COMMAND is dead before the lock could \
             expire. Exit status 70.",
        ),
        (
            "5. Signals.",
            "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to redlock-run are passed \
             on to COMMAND's process group. The lock is kept, and refreshed, until COMMAND has \
             exited. If redlock-run is killed with SIGKILL, COMMAND is killed too (Linux \
             parent-death signal).",
        ),
        (
            "6. Leftovers.",
            "Once COMMAND has exited, processes it left behind in its process group (such as \
             sh -c 'daemon & exit') get SIGTERM, then SIGKILL after --kill-after, before the \
             lock is released.",
        ),
        (
            "7. Release.",
            "The lock and its holder record are deleted, only if the lock still holds our token, \
             and waiters are woken. A release that finds the token replaced deletes nothing and \
             warns that COMMAND may have run unprotected. If Redis is unreachable at release \
             time, redlock-run warns and the TTL cleans up. The exit status is COMMAND's.",
        ),
    ];
    for (term, text) in steps {
        item(r, [bold(term)], text);
    }
    para(
        r,
        "With several --redis URLs (independent masters, not replicas of one another) the lock \
         follows the Redlock algorithm: it is held when a majority of the N servers accepted it \
         within its validity, which is the TTL minus the time spent acquiring minus a clock \
         drift allowance of 1% of the TTL plus 2 ms. Each server gets a short timeout, a failed \
         attempt is released on every server before the next one, and every refresh also needs \
         a majority.",
    );
}

/// COMMANDS: every visible subcommand with its own arguments.
fn commands(r: &mut Roff) {
    let mut cmd = Cli::command();
    cmd.build();
    section(r, "COMMANDS");
    para(
        r,
        "Without a subcommand, redlock-run runs COMMAND under the lock (the options above). \
         The subcommands inspect and clear locks or print documentation. --redis, --prefix, \
         the --tls options, -v and -q apply to them as well, before or after the subcommand's \
         name.",
    );
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let own: Vec<&Arg> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_global_set())
            .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::HelpLong))
            .collect();
        r.control("SS", [sub.get_name()]);
        let mut usage = vec![bold(BIN), roman(" "), bold(sub.get_name())];
        for arg in &own {
            usage.push(roman(" "));
            usage.extend(synopsis(arg));
        }
        r.control("PP", []);
        r.text(usage);
        r.control("PP", []);
        let about = sub.get_long_about().or(sub.get_about());
        r.text([roman(about.map(|s| s.to_string()).unwrap_or_default())]);
        for arg in own {
            let mut help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|s| s.to_string())
                .unwrap_or_default();
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                help.push_str(&format!(": one of {}", values.join(", ")));
            }
            let mut term = synopsis(arg);
            // Drop the brackets of optional arguments in the term list.
            if arg.get_long().is_some() {
                term.retain(|i| !matches!(i, Inline::Roman(s) if s == "[" || s == "]"));
            }
            item(r, term, &help);
        }
    }
}

/// `--token TOKEN`, `[--json]`, `KEY...` in roff inlines.
fn synopsis(arg: &Arg) -> Vec<Inline> {
    let name = arg
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
    let many = matches!(arg.get_action(), ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let mut out = Vec::new();
    let optional = !arg.is_required_set();
    if optional {
        out.push(roman("["));
    }
    match arg.get_long() {
        Some(long) => {
            out.push(bold(format!("--{long}")));
            if arg.get_action().takes_values() {
                out.push(roman(" "));
                out.push(italic(name));
            }
        }
        None => out.push(italic(name)),
    }
    if many {
        out.push(roman("..."));
    }
    if optional {
        out.push(roman("]"));
    }
    out
}

fn exit_status(r: &mut Roff) {
    section(r, "EXIT STATUS");
    para(r, "When running COMMAND:");
    for row in Exit::ROWS {
        let (code, meaning) = (row.code, row.when);
        item(r, [bold(code)], meaning);
    }
    para(
        r,
        "status exits 0 if every KEY is held and 1 if any is free; list exits 0, also when no \
         lock is held; force-release exits 0 if a lock was deleted and 1 if there was none (or \
         the token did not match). All three exit 69 if Redis is unavailable and 2 on bad \
         arguments. generate exits 0.",
    );
}

fn events(r: &mut Roff) {
    section(r, "EVENTS");
    para(
        r,
        "Every line redlock-run itself writes on stderr is one of these events. With \
         --log-format json each is one JSON object with ts (RFC 3339, UTC, milliseconds), \
         level, event, key, msg and the fields named below; -q keeps the errors, -v adds the \
         info events.",
    );
    for ev in crate::log::Ev::ALL {
        let fields = match ev.fields() {
            "" => String::new(),
            f => format!(" Fields: {f}."),
        };
        item(
            r,
            [bold(ev.name()), roman(format!(" ({})", ev.level().name()))],
            &format!("{}.{fields}", ev.meaning()),
        );
    }
}

fn environment(r: &mut Roff) {
    section(r, "ENVIRONMENT");
    para(r, "Read by redlock-run:");
    item(
        r,
        [bold("REDLOCK_REDIS_URL")],
        "Comma-separated Redis URLs, used when no --redis is given. Several URLs form a \
         Redlock quorum. Prefer it to --redis for URLs with a password: the command line is \
         visible to every user in ps(1).",
    );
    item(
        r,
        [bold("REDIS_URL")],
        &format!(
            "Used when neither --redis nor REDLOCK_REDIS_URL is given; otherwise the default \
             is {DEFAULT_URL}."
        ),
    );
    item(
        r,
        [bold("SSL_CERT_FILE"), roman(", "), bold("SSL_CERT_DIR")],
        "Where the system's CA certificates are, for rediss:// URLs without --tls-ca.",
    );
    para(
        r,
        "URLs have the forms redis://[user:password@]host[:port][/db], rediss://... (TLS), \
         redis+unix:///path/to.sock and unix:///path. A password is never printed: not in \
         errors, not with --verbose, not by status or list.",
    );
    para(
        r,
        "Set for COMMAND, in addition to redlock-run's own environment:",
    );
    item(
        r,
        [bold("REDLOCK_KEY")],
        "The lock name, as given to --key.",
    );
    item(
        r,
        [bold("REDLOCK_TOKEN")],
        "This holder's token, a random UUID; status shows it and force-release --token \
         accepts it.",
    );
    item(
        r,
        [bold("REDLOCK_FENCE")],
        "The fencing token: an integer that grows with every acquisition of the key. See \
         SAFETY.",
    );
}

fn data_in_redis(r: &mut Roff) {
    section(r, "DATA IN REDIS");
    para(
        r,
        "With prefix P (--prefix, default redlock:) and key K, a lock uses these keys. The \
         braces are a Redis Cluster hash tag: all of a lock's keys live in one slot.",
    );
    item(
        r,
        [bold("P{K}")],
        "A string holding the holder's token; expires after the TTL, pushed forward by every \
         refresh.",
    );
    item(
        r,
        [bold("P{K}:holder")],
        "A hash with the fields token, host, pid (of redlock-run), user, command, acquired_at \
         (RFC 3339, UTC) and ttl_ms; same expiry as the lock.",
    );
    item(
        r,
        [bold("P{K}:fence")],
        "A string holding the last fencing token issued. It never expires: it must only grow.",
    );
    item(
        r,
        [bold("P{K}:waiters")],
        "While the lock is busy: a sorted set of the tokens waiting for it, by arrival, each \
         with a string P{K}:waiters:TOKEN that lapses 3 s after that waiter's last try.",
    );
    item(
        r,
        [bold("P{K}:holders, P{K}:holder:TOKEN, P{K}:limit")],
        "With --limit N above 1: a sorted set of the holders by expiry, a holder record per \
         holder (with its fence), and N; they expire with their last holder.",
    );
    para(
        r,
        "Releasing a lock publishes the message released on the Pub/Sub channel \
         P{K}:wake:TOKEN of the first live waiter in line, or, with nobody in line, on the \
         channel named like the lock key, P{K}, to which every waiting redlock-run also \
         subscribes.",
    );
}

fn tls(r: &mut Roff) {
    section(r, "TLS");
    para(
        r,
        "rediss:// URLs connect with TLS (rustls; TLS 1.2 and 1.3). The server's certificate \
         must be valid for the host name or IP address in the URL and signed by a CA in \
         --tls-ca, or by one of the system's CAs when --tls-ca is not given. A server that \
         cannot be verified is refused: exit 69. For servers that require client \
         certificates (redis-server --tls-auth-clients yes), give --tls-cert and --tls-key. \
         The --tls options apply to every rediss:// URL; giving them without a rediss:// URL \
         is a usage error.",
    );
}

fn permissions(r: &mut Roff) {
    section(r, "REDIS PERMISSIONS");
    para(
        r,
        "A Redis ACL user with only what redlock-run needs, for the default prefix \
         (change both patterns for another --prefix):",
    );
    verbatim(r, &acl_command());
    para(
        r,
        "The Lua scripts run with the caller's permissions, so the commands they call are \
         listed too. SUBSCRIBE is used while waiting for a busy lock, the sorted-set \
         commands and EXISTS for the line of waiters, SCAN by list, and the channel pattern \
         covers the release notifications. A missing permission fails with \
         the server's NOPERM message and exit 69.",
    );
    para(
        r,
        "For --limit N above 1 (a counting semaphore) also grant: \
         +time +zcard +zremrangebyscore +zscore.",
    );
}

/// The ACL rules of the man page (and README): tests/acl.rs reads them back
/// from the man page and checks that they are enough, and that each
/// command is needed.
const ACL_RULES: [&str; 4] = [
    "resetkeys '~redlock:*' resetchannels '&redlock:*'",
    "-@all +eval +get +pttl +hgetall +hmget +set +del",
    "+incr +hset +pexpire +publish +subscribe +scan",
    "+zadd +zrange +zrem +exists",
];

/// `redis-cli ACL SETUSER ...`, ready to paste into a shell.
fn acl_command() -> Vec<String> {
    let mut lines = vec!["redis-cli ACL SETUSER redlock on '>PASSWORD' \\".to_string()];
    for (i, rules_line) in ACL_RULES.iter().enumerate() {
        let more = if i + 1 < ACL_RULES.len() { " \\" } else { "" };
        lines.push(format!("    {rules_line}{more}"));
    }
    lines
}

fn safety(r: &mut Roff) {
    section(r, "SAFETY");
    para(
        r,
        "What redlock-run guarantees: COMMAND starts only after the lock was acquired; it is \
         stopped (SIGTERM, then SIGKILL) before the lock could expire by redlock-run's own \
         monotonic clock when refreshes fail; it dies with redlock-run; the lock is released \
         only with the token that took it, so a late release never deletes another holder's \
         lock; and the lock is not released while anything of COMMAND's process group still \
         runs.",
    );
    para(
        r,
        "What it cannot guarantee: that no two holders ever overlap. A lock in Redis is a \
         lease. It can be lost to a failover (replication is asynchronous, so a replica \
         promoted to master may not have the lock), to a restart without persistence, to \
         someone deleting it (force-release), or to a pause of the whole host longer than the \
         remaining TTL (a VM freeze, SIGSTOP), after which COMMAND runs on for a moment while \
         someone else holds the lock. Processes that leave COMMAND's process group (setsid, \
         double forks into a new group) are not stopped. Use independent masters for \
         Redlock, never replicas of one another.",
    );
    para(
        r,
        "Fencing: when correctness matters, pass REDLOCK_FENCE to the resource COMMAND \
         changes, and have the resource reject any write with a smaller fence than the \
         largest it has seen. This stops a holder that lost its lock from overwriting the \
         work of the next one, whatever the cause. The fence only grows as long as Redis \
         keeps the P{K}:fence key (with Redlock: as long as a majority of the servers keep \
         it), so use persistence (appendonly) on the lock servers.",
    );
}

fn examples(r: &mut Roff) {
    section(r, "EXAMPLES");
    para(
        r,
        "A nightly job that never overlaps itself, on however many hosts cron starts it:",
    );
    verbatim(
        r,
        &["redlock-run --key nightly-backup --ttl 30s -- pg_dump -f /backup/db.sql"],
    );
    para(
        r,
        "In a crontab: try once (-n), and if another host still has the job, skip this run \
         with exit status 0 (-E 0) so that cron sends no mail:",
    );
    verbatim(
        r,
        &["*/5 * * * * redlock-run -k report -n -E 0 -c 'make-report > /tmp/report'"],
    );
    para(
        r,
        "A CI deploy job: wait up to 10 minutes for the previous deploy to finish; exit 75 \
         fails the job if it does not:",
    );
    verbatim(
        r,
        &[
            "export REDLOCK_REDIS_URL=rediss://ci:$REDIS_PASSWORD@redis.internal:6380",
            "redlock-run -k deploy-production --wait 10m -- ./deploy.sh",
        ],
    );
    para(
        r,
        "Who holds a lock, every held lock, and clearing a stuck one by hand:",
    );
    verbatim(
        r,
        &[
            "redlock-run status nightly-backup",
            "redlock-run list --json",
            "redlock-run force-release nightly-backup --token 0b4f...",
        ],
    );
    para(r, "A Redlock quorum of three independent masters:");
    verbatim(
        r,
        &[
            "redlock-run --redis redis://r1:6379 --redis redis://r2:6379 \\",
            "    --redis redis://r3:6379 -k migrate -- ./migrate.sh",
        ],
    );
    para(r, "Mutual TLS with a private CA:");
    verbatim(
        r,
        &[
            "redlock-run --redis rediss://redis.internal:6380 --tls-ca ca.pem \\",
            "    --tls-cert client.pem --tls-key client.key -k job -- ./job.sh",
        ],
    );
    para(r, "Passing the fencing token to the protected resource:");
    verbatim(
        r,
        &["redlock-run -k import -c './import --fence \"$REDLOCK_FENCE\"'"],
    );
    para(r, "Reading this page without installing it:");
    verbatim(r, &["redlock-run generate man | man -l -"]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_is_byte_stable_and_lists_every_exit_code() {
        let page = String::from_utf8(man().expect("render")).expect("utf-8");
        assert_eq!(page.as_bytes(), man().expect("render again"));
        assert_eq!(page.matches(".ie \\n(.g .ds Aq").count(), 1, "one preamble");
        for code in Exit::ROWS.iter().map(|row| row.code) {
            let roff = code.replace('-', "\\-").replace('\'', "\\*(Aq");
            assert!(page.contains(&format!("\\fB{roff}\\fR")), "{code} missing");
        }
    }
}
