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

/// Write `what` to stdout (a closed pipe is not an error).
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

/// The man page: `docs/man.roff`, a roff template holding the prose, with
/// its placeholders (a line of its own, `@NAME@`) filled in from the clap
/// definition, [`Exit::ROWS`] and [`ACL_RULES`].
const TEMPLATE: &str = include_str!("docs/man.roff");

/// The page: roff's preamble once, then the template filled in.
fn man() -> std::io::Result<Vec<u8>> {
    let page = Man::new(Cli::command());
    let mut out = Roff::new().render();
    for line in TEMPLATE.lines() {
        match line {
            "@HEAD@" => {
                out += &mangen(&page, Man::render_title)?;
                out += &mangen(&page, Man::render_name_section)?;
            }
            "@DESCRIPTION@" => out += &mangen(&page, Man::render_description_section)?,
            "@OPTIONS@" => out += &mangen(&page, Man::render_options_section)?,
            "@VERSION@" => out += &mangen(&page, Man::render_version_section)?,
            "@COMMANDS@" => out += &ours(commands),
            "@EXIT_ROWS@" => out += &ours(exit_rows),
            "@EVENTS@" => out += &ours(events),
            "@ACL@" => out += &ours(|r| verbatim(r, &acl_command())),
            text => {
                out += &text.replace("@DEFAULT_URL@", DEFAULT_URL);
                out.push('\n');
            }
        }
    }
    Ok(out.into_bytes())
}

/// Every rendered piece repeats roff's apostrophe preamble; the page has
/// it once, at the top.
fn without_preamble(text: String) -> String {
    let preamble = Roff::new().render();
    match text.strip_prefix(&preamble) {
        Some(body) => body.to_string(),
        None => text,
    }
}

/// One section as clap_mangen renders it.
fn mangen(
    page: &Man,
    section: fn(&Man, &mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<String> {
    let mut buf = Vec::new();
    section(page, &mut buf)?;
    Ok(without_preamble(String::from_utf8_lossy(&buf).into_owned()))
}

/// A piece we write with roff's builder.
fn ours(write: impl Fn(&mut Roff)) -> String {
    let mut r = Roff::new();
    write(&mut r);
    without_preamble(r.render())
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

/// The rows of EXIT STATUS, from the exit-code enum.
fn exit_rows(r: &mut Roff) {
    for row in Exit::ROWS {
        let (code, meaning) = (row.code, row.when);
        item(r, [bold(code)], meaning);
    }
}

/// The stderr events, from the log's own catalog.
fn events(r: &mut Roff) {
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

/// The ACL rules of the man page (and README): tests/acl.rs reads them back
/// from the man page and checks that they are enough, and that each
/// command is needed.
const ACL_RULES: [&str; 4] = [
    "resetkeys '~redlock:*' resetchannels '&redlock:*'",
    "-@all +eval +get +pttl +hgetall +hmget +set +del",
    "+incr +hset +pexpire +publish +subscribe +scan",
    "+zadd +zrange +zrem +exists +time +info '+pubsub|numsub'",
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
