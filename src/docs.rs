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
        Doc::Bash => Shell::Bash,
        Doc::Zsh => Shell::Zsh,
        Doc::Fish => Shell::Fish,
        Doc::Elvish => Shell::Elvish,
        Doc::Powershell => Shell::PowerShell,
    };
    let mut out = Vec::new();
    let mut cmd = crate::cli::without_connection_options(Cli::command());
    clap_complete::generate(shell, &mut cmd, BIN, &mut out);
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
    let page = Man::new(with_every_help(Cli::command()));
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
            "@SYNOPSIS@" => out += &ours(synopsis_lines),
            "@ENVIRONMENT@" => out += &ours(environment),
            "@COMMANDS@" => out += &ours(commands),
            "@EXIT_ROWS@" => out += &ours(exit_rows),
            "@EVENTS@" => out += &ours(events),
            "@ACL@" => out += &ours(|r| verbatim(r, &acl_command())),
            "@TREE@" => out += &ours(tree),
            text => {
                out += &text.replace("@DEFAULT_URL@", DEFAULT_URL);
                out.push('\n');
            }
        }
    }
    Ok(out.into_bytes())
}

/// The definition with a long help for every option: clap_mangen leaves
/// an option's text out when it is hidden from `-h` and has no long help
/// of its own, and the man page is the reference for every option.
/// A default the help states in words (`[default: ttl / 3]`, its last
/// paragraph) goes where clap_mangen puts the others: after the option's
/// name (this definition only renders the page, never parses).
fn with_every_help(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| {
        let arg = match (arg.get_long_help(), arg.get_help().cloned()) {
            (None, Some(help)) if arg.is_hide_short_help_set() => arg.long_help(help),
            _ => arg,
        };
        let long = arg
            .get_long_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let Some((text, default)) = long.rsplit_once("\n\n[default: ") else {
            return arg;
        };
        // clap takes a 'static default (without its "string" feature);
        // the page is rendered once per process.
        let default: &'static str = String::leak(default.trim_end_matches(']').to_string());
        arg.long_help(text.to_string())
            .value_parser(clap::value_parser!(String))
            .default_value(default)
    })
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

/// docs/safety.md's section on the tree's end, between its markers: the
/// man page says the same words (paragraphs, bullets, and the table as
/// one tagged paragraph a row, a line a column).
const SAFETY_MD: &str = include_str!("../docs/safety.md");

fn tree(r: &mut Roff) {
    let text = SAFETY_MD
        .split_once("<!-- tree: begin")
        .and_then(|(_, rest)| rest.split_once("-->"))
        .and_then(|(_, rest)| rest.split_once("<!-- tree: end -->"))
        .map_or("", |(section, _)| section);
    let mut header: Vec<String> = Vec::new();
    for block in text.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        if block.starts_with('|') {
            for row in block.lines() {
                if row.chars().all(|c| c == '|' || c == '-') {
                    continue;
                }
                let cells: Vec<String> = row
                    .trim_matches('|')
                    .split(" | ")
                    .map(|c| plain(c.trim()))
                    .collect();
                if cells.iter().all(|c| c.chars().all(|ch| ch == '-')) {
                    continue;
                }
                if header.is_empty() {
                    header = cells;
                    continue;
                }
                r.control("TP", []);
                r.text([bold(cells[0].as_str())]);
                for (name, cell) in header.iter().zip(&cells).skip(1) {
                    r.text([italic(format!("{name}: ").as_str()), roman(cell.as_str())]);
                    r.control("br", []);
                }
            }
        } else if block.starts_with("- ") {
            for bullet in block.split("\n- ") {
                let body = bullet.trim_start_matches("- ");
                r.control("IP", ["\\(bu", "2"]);
                r.text([roman(plain(&unwrap(body)).as_str())]);
            }
        } else {
            para(r, &plain(&unwrap(block)));
        }
    }
}

/// Markdown lines joined into one line of text.
fn unwrap(block: &str) -> String {
    block.lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

/// Markdown's emphasis and code marks dropped.
fn plain(text: &str) -> String {
    text.replace("**", "").replace('`', "")
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

/// SYNOPSIS: the two forms of the run mode, then every visible subcommand
/// with all of its own arguments.
fn synopsis_lines(r: &mut Roff) {
    let mut cmd = Cli::command();
    cmd.build();
    let run = [bold(BIN), roman(" ["), italic("OPTIONS"), roman("] ")];
    let key = [bold("--key"), roman(" "), italic("KEY"), roman(" ")];
    let mut lines = vec![
        [
            &run[..],
            &key[..],
            &[bold("--"), roman(" "), italic("COMMAND")],
        ]
        .concat(),
        [
            &run[..],
            &key[..],
            &[bold("-c"), roman(" "), italic("LINE")],
        ]
        .concat(),
    ];
    lines[0].extend([roman(" ["), italic("ARG"), roman("...]")]);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut line = vec![bold(BIN), roman(" "), bold(sub.get_name())];
        for arg in own_args(sub) {
            line.push(roman(" "));
            line.extend(synopsis(arg));
        }
        lines.push(line);
    }
    // Left-adjusted: a long line wraps without stretched spaces.
    r.control("ad", ["l"]);
    for (i, line) in lines.into_iter().enumerate() {
        if i > 0 {
            r.control("br", []);
        }
        r.text(line);
    }
    r.control("ad", ["b"]);
}

/// ENVIRONMENT, the variables that stand for an option: every option with
/// an `env` in the clap definition, with that option's text.
fn environment(r: &mut Roff) {
    let mut cmd = Cli::command();
    cmd.build();
    let mut seen = Vec::new();
    let subs: Vec<&clap::Command> = cmd.get_subcommands().collect();
    for arg in std::iter::once(&cmd)
        .chain(subs)
        .flat_map(|c| c.get_arguments())
    {
        let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let var = var.to_string_lossy().into_owned();
        if seen.contains(&var) {
            continue;
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        item(
            r,
            [bold(var.as_str())],
            &format!("Used for --{long} when it is not given. {help}."),
        );
        seen.push(var);
    }
}

/// A subcommand's own arguments: not the global ones, not help.
fn own_args(sub: &clap::Command) -> Vec<&Arg> {
    sub.get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set())
        .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::HelpLong))
        .collect()
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
        let own = own_args(sub);
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
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    match arg.get_long() {
        Some(long) => {
            out.push(bold(format!("--{long}")));
            if arg.get_action().takes_values() {
                out.push(roman(" "));
                out.push(italic(name));
            }
        }
        // A positional with fixed values shows them: man|bash|...
        None if !values.is_empty() => {
            for (i, value) in values.into_iter().enumerate() {
                if i > 0 {
                    out.push(roman("|"));
                }
                out.push(bold(value));
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
const ACL_RULES: [&str; 5] = [
    "resetkeys '~redlock:*' resetchannels '&redlock:*'",
    "-@all +eval +evalsha +get +pttl +hgetall +hmget +set +del",
    "+incr +hset +pexpire +publish +subscribe +scan",
    "+zadd +zrange +zrem +exists +time +info '+pubsub|numsub'",
    "+role +wait +ping '+cluster|slots'",
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

    /// The page as text: roff's escapes and font changes undone.
    fn page_text() -> String {
        let page = String::from_utf8(man().expect("render")).expect("utf-8");
        page.replace("\\-", "-")
            .replace("\\*(Aq", "'")
            .replace("\\&", "")
            .replace("\\fB", "")
            .replace("\\fI", "")
            .replace("\\fR", "")
            .replace("\\:", "")
            .replace("\\\\", "\\")
    }

    /// A section of the page, from `.SH NAME` to the next `.SH`.
    fn section_of<'a>(page: &'a str, name: &str) -> &'a str {
        let start = page
            .find(&format!(".SH {name}\n"))
            .unwrap_or_else(|| panic!("no {name} section"));
        let rest = &page[start + 4..];
        &rest[..rest.find("\n.SH ").unwrap_or(rest.len())]
    }

    /// Every argument of the definition: (where, argument), help left out.
    fn every_arg(cmd: &clap::Command) -> Vec<(String, Arg)> {
        let mut args: Vec<(String, Arg)> = cmd
            .get_arguments()
            .map(|a| ("redlock-run".to_string(), a.clone()))
            .collect();
        for sub in cmd.get_subcommands() {
            args.extend(
                own_args(sub)
                    .into_iter()
                    .map(|a| (sub.get_name().to_string(), a.clone())),
            );
        }
        args.retain(|(_, a)| {
            !matches!(
                a.get_action(),
                ArgAction::Help | ArgAction::HelpLong | ArgAction::Version
            )
        });
        args
    }

    #[test]
    fn every_option_has_its_text_in_the_man_page() {
        let page = page_text();
        let mut cmd = Cli::command();
        cmd.build();
        let args = every_arg(&cmd);
        assert!(args.len() > 40, "{}", args.len());
        for (whose, arg) in args {
            let id = arg.get_id();
            let help = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string());
            let help = help.unwrap_or_default();
            let first = help.lines().next().unwrap_or_default().trim();
            assert!(!first.is_empty(), "{whose} {id} has no help text");
            assert!(
                page.contains(first),
                "the man page lacks the text of {whose} {id}: {first:?}"
            );
        }
    }

    #[test]
    fn the_synopsis_names_every_subcommand_and_its_options() {
        let page = page_text();
        let synopsis = section_of(&page, "SYNOPSIS");
        let mut cmd = Cli::command();
        cmd.build();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            // A long line may be broken by the page's source? No: one per .br.
            let line = synopsis
                .split(".br")
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .find(|l| l.starts_with(&format!("redlock-run {name}")))
                .unwrap_or_else(|| panic!("SYNOPSIS lacks {name}:\n{synopsis}"));
            for arg in own_args(sub) {
                let shown = match arg.get_long() {
                    Some(long) => format!("--{long}"),
                    None => match arg.get_possible_values().first() {
                        Some(value) => value.get_name().to_string(),
                        None => arg.get_value_names().expect("a value name")[0].to_string(),
                    },
                };
                assert!(
                    line.contains(&shown),
                    "SYNOPSIS of {name} lacks {shown}: {line}"
                );
            }
        }
    }

    /// The variables the source names: read with `std::env::var`,
    /// `var_os` or a helper, or any `REDLOCK_` name, found in the source
    /// itself.
    fn variables_read_by_the_source() -> Vec<String> {
        fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    walk(&path, found);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                // Read through a helper too (an `env_os`), or named as a
                // literal anywhere ("REDLOCK_...": set for COMMAND, read back).
                for (marker, prefix) in [
                    ("var(\"", ""),
                    ("var_os(\"", ""),
                    ("env_os(\"", ""),
                    ("\"REDLOCK_", "REDLOCK_"),
                ] {
                    for piece in text.split(marker).skip(1) {
                        let rest: String = piece.chars().take_while(|c| *c != '"').collect();
                        let name = format!("{prefix}{rest}");
                        let upper = name.chars().all(|c| c.is_ascii_uppercase() || c == '_');
                        if upper && !rest.is_empty() {
                            found.push(name);
                        }
                    }
                }
            }
        }
        let mut found = Vec::new();
        walk(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
            &mut found,
        );
        found.sort();
        found.dedup();
        found
    }

    #[test]
    fn every_environment_variable_is_described_in_environment() {
        let page = page_text();
        let environment = section_of(&page, "ENVIRONMENT");
        let mut cmd = Cli::command();
        cmd.build();
        let mut variables: Vec<String> = every_arg(&cmd)
            .iter()
            .filter_map(|(_, a)| a.get_env().map(|v| v.to_string_lossy().into_owned()))
            .collect();
        variables.extend(["REDLOCK_REDIS_URL", "REDIS_URL"].map(String::from));
        variables.extend(variables_read_by_the_source());
        variables.retain(|v| v != "PATH");
        // One of each source: clap's env, a var, a literal for COMMAND.
        for known in ["REDLOCK_QUEUE", "LOGNAME", "REDLOCK_LOST_REASON"] {
            assert!(
                variables.iter().any(|v| v == known),
                "{known}: {variables:?}"
            );
        }
        for var in variables {
            // `.TP`, the name (maybe with others), then a line of text.
            let entry = environment.split(".TP\n").skip(1).find(|e| {
                e.lines()
                    .next()
                    .is_some_and(|head| head.split(", ").any(|n| n == var))
            });
            let text = entry.and_then(|e| e.lines().nth(1)).unwrap_or_default();
            assert!(
                !text.trim().is_empty(),
                "ENVIRONMENT does not describe {var}"
            );
        }
    }

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
