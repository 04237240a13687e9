//! Which protocol a server gets: Lua scripts where EVAL works; the
//! server's native compare-and-set (`SET ... IFEQ`, `DELIFEQ`, `DELEX`,
//! `MSETEX`) where EVAL is denied or absent; transactions (WATCH/MULTI/
//! EXEC) where neither. Decided by what the server allows on this
//! connection, never by its version string, and found without writing
//! anything: `EVAL "return 1" 0` (touches no key), `COMMAND INFO` and
//! `COMMAND DOCS SET`.
//!
//! A run tries its script first: the first EVAL a connection refuses
//! (NOPERM, Lua unloaded, no such command) writes nothing, and the
//! connection then runs the plain lock without scripts (`scriptless`,
//! `txn`). A feature that needs scripts is refused ([`refusal`]: exit 77,
//! naming the feature and what the server lacks) before anything is
//! written; `doctor` says which protocol the server gets
//! ([`Found::protocol`]).

use super::probe::{Failed, Reply};

/// Whether EVAL runs on this connection, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripting {
    /// `EVAL "return 1" 0` answered 1.
    Works,
    /// The user may not run EVAL (ACL: NOPERM).
    Denied,
    /// Lua is not there: Valkey 9.1's Lua module unloaded.
    Unloaded,
    /// EVAL is not a command here (renamed or disabled).
    Unknown,
    /// Another answer or error: the server's words (cleaned).
    Other(String),
}

/// The native compare-and-set commands a server offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Native {
    /// `SET key value IFEQ old` (Valkey 8.1, Redis 8.4).
    pub ifeq: bool,
    /// `DELIFEQ key value` (Valkey 9.0).
    pub delifeq: bool,
    /// `DELEX key IFEQ value` (Redis 8.4).
    pub delex: bool,
    /// `MSETEX` (Valkey 9.1, Redis 8.4).
    pub msetex: bool,
}

/// The protocol a server gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Lua scripts (EVAL): every feature.
    Scripts,
    /// The server's compare-and-set commands; a release without
    /// `DELIFEQ` or `DELEX` falls back to a transaction.
    Native(Native),
    /// WATCH/MULTI/EXEC only.
    Transactions,
}

/// What a connection allows, as found by [`detect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub scripting: Scripting,
    pub native: Native,
    /// `COMMAND` was refused or failed: the native commands are unknown
    /// (taken as absent).
    pub commands_unknown: Option<String>,
}

impl Scripting {
    /// What a reply to `EVAL "return 1" 0` says about scripts.
    pub fn of(answer: &Result<Reply, Failed>) -> Scripting {
        match answer {
            Ok(reply) if reply.int() == Some(1) => Scripting::Works,
            Ok(reply) => Scripting::Other(format!("EVAL 'return 1' answered {reply:?}, not 1")),
            Err(Failed::Refused { code, message }) => Scripting::of_error(code, message)
                .unwrap_or_else(|| Scripting::Other(crate::secrets::untrusted(message))),
            Err(Failed::Io(why)) => Scripting::Other(why.clone()),
        }
    }

    /// Whether an error (its code, if any, and its words) says that
    /// scripts cannot run here: `None` for any other error. Redis 6.2 adds
    /// "or its subcommand", redis-rs words the code as "NoPerm:", Valkey
    /// names the user; an error raised by a command inside a script
    /// ("ACL failure in script", "Error running script") is not one.
    pub fn of_error(code: &str, message: &str) -> Option<Scripting> {
        let lower = message.to_ascii_lowercase();
        // Quoted as 'eval' (Redis 7, Valkey) or `eval` (Redis 6.2).
        let scripting = ["'eval'", "'evalsha'", "'fcall'", "'script"];
        let backticked = lower.replace('`', "'");
        let names_eval = scripting.iter().any(|c| backticked.contains(c));
        if lower.contains("in script") || lower.contains("running script") {
            return None;
        }
        if lower.contains("could not find scripting engine") {
            return Some(Scripting::Unloaded);
        }
        let noperm = code.eq_ignore_ascii_case("NOPERM") || lower.contains("noperm");
        if (noperm || lower.contains("no permissions")) && names_eval {
            return Some(Scripting::Denied);
        }
        if lower.contains("unknown command") && names_eval {
            return Some(Scripting::Unknown);
        }
        None
    }

    /// What would let scripts run again, for a sentence.
    pub fn remedy(&self) -> &'static str {
        match self {
            Scripting::Denied => {
                "give the Redis user the permission to run EVAL (+eval: see REDIS PERMISSIONS \
                 in redlock-run(1))"
            }
            Scripting::Unloaded => "load the server's Lua module",
            _ => "enable EVAL (not renamed or disabled)",
        }
    }

    /// What the server lacks, for a sentence: "denies EVAL (ACL: NOPERM)".
    pub fn lack(&self) -> String {
        match self {
            Scripting::Works => "runs Lua scripts".into(),
            Scripting::Denied => "denies EVAL to this user (ACL: NOPERM)".into(),
            Scripting::Unloaded => {
                "runs no Lua (its Lua module is unloaded: 'Could not find scripting \
                 engine')"
                    .into()
            }
            Scripting::Unknown => "has no EVAL command (renamed or disabled)".into(),
            Scripting::Other(why) => format!("cannot run EVAL ({why})"),
        }
    }
}

impl Native {
    /// Whether any compare-and-set command is there.
    pub fn any(&self) -> bool {
        self.ifeq || self.delifeq || self.delex || self.msetex
    }

    /// The commands present, as "SET IFEQ, DELIFEQ"; "none" for none.
    pub fn names(&self) -> String {
        let all = [
            (self.ifeq, "SET IFEQ"),
            (self.delifeq, "DELIFEQ"),
            (self.delex, "DELEX"),
            (self.msetex, "MSETEX"),
        ];
        let present: Vec<&str> = all.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect();
        match present.is_empty() {
            true => "none".into(),
            false => present.join(", "),
        }
    }
}

impl Found {
    /// The protocol this connection gets: scripts where EVAL works, the
    /// native commands where there are any, else transactions.
    pub fn protocol(&self) -> Protocol {
        match (&self.scripting, self.native.any()) {
            (Scripting::Works, _) => Protocol::Scripts,
            (_, true) => Protocol::Native(self.native),
            (_, false) => Protocol::Transactions,
        }
    }

    /// Why: "EVAL works", or what the server lacks and what it has.
    pub fn reason(&self) -> String {
        let mut why = match &self.scripting {
            Scripting::Works => "EVAL runs Lua scripts".to_string(),
            other if self.native.any() => format!(
                "the server {}, and has {}",
                other.lack(),
                self.native.names()
            ),
            other => format!(
                "the server {}, and has no compare-and-set command (SET IFEQ, DELIFEQ, \
                 DELEX)",
                other.lack()
            ),
        };
        if let (false, Some(e)) = (self.scripting == Scripting::Works, &self.commands_unknown) {
            why.push_str(&format!(" (COMMAND failed, so none is known: {e})"));
        }
        why
    }
}

impl Protocol {
    /// Its name, as `-v` and `doctor` say it.
    pub fn name(&self) -> &'static str {
        match self {
            Protocol::Scripts => "scripts",
            Protocol::Native(_) => "native compare-and-set",
            Protocol::Transactions => "transactions",
        }
    }

    /// How each step of a plain lock is made with it, for `-v` and
    /// `doctor`.
    pub fn steps(&self) -> String {
        match self {
            Protocol::Scripts => "every step one EVAL".into(),
            Protocol::Native(n) if n.ifeq => {
                "refresh by SET IFEQ (one round trip); acquire, release, force-release by \
                 WATCH/MULTI/EXEC (two)"
                    .into()
            }
            _ => "acquire, refresh, release, force-release by WATCH/MULTI/EXEC (two round \
                  trips each)"
                .into(),
        }
    }
}

/// Whether a reply to `COMMAND INFO NAME` names a command (an unknown
/// one is a nil, or an empty array, in its place).
pub fn command_present(reply: &Reply) -> bool {
    match reply.items().first() {
        Some(Reply::List(info)) | Some(Reply::Other(info)) => !info.is_empty(),
        _ => false,
    }
}

/// Whether a reply to `COMMAND DOCS SET` lists an `IFEQ` token among
/// SET's arguments (Valkey 8.1, Redis 8.4). Redis 6.2 has no COMMAND
/// DOCS (an error: no IFEQ, which it has not either).
pub fn docs_list_ifeq(reply: &Reply) -> bool {
    fn walk(reply: &Reply) -> bool {
        match reply {
            Reply::Text(s) => s.eq_ignore_ascii_case("IFEQ"),
            Reply::List(items) | Reply::Other(items) => items.iter().any(walk),
            _ => false,
        }
    }
    walk(reply)
}

/// Find out what a connection allows, writing nothing; `ask` sends one
/// command (see `probe::Conn::call`).
pub fn detect(ask: &mut dyn FnMut(&[&str]) -> Result<Reply, Failed>) -> Found {
    let scripting = Scripting::of(&ask(&["EVAL", "return 1", "0"]));
    let (native, commands_unknown) = native(ask);
    Found {
        scripting,
        native,
        commands_unknown,
    }
}

/// The compare-and-set commands a connection offers, and why none is
/// known when `COMMAND` failed.
pub fn native(ask: &mut dyn FnMut(&[&str]) -> Result<Reply, Failed>) -> (Native, Option<String>) {
    let mut commands_unknown = None;
    let mut has = |name: &str| match ask(&["COMMAND", "INFO", name]) {
        Ok(reply) => command_present(&reply),
        Err(e) => {
            commands_unknown.get_or_insert_with(|| e.to_string());
            false
        }
    };
    let (delifeq, delex, msetex) = (has("DELIFEQ"), has("DELEX"), has("MSETEX"));
    let ifeq = matches!(ask(&["COMMAND", "DOCS", "SET"]), Ok(reply) if docs_list_ifeq(&reply));
    let native = Native {
        ifeq,
        delifeq,
        delex,
        msetex,
    };
    (native, commands_unknown)
}

/// The feature a script of this build is for, from its text.
pub(super) fn feature_of(lua: &[u8]) -> &'static str {
    (super::scripts::ALL.iter())
        .find(|(text, _)| text.as_bytes() == lua)
        .map_or("lock", |(_, feature)| feature)
}

/// What an error to `cmd` says about scripts, when `cmd` is an EVAL and
/// the error says the server will not run it (see
/// [`Scripting::of_error`]); `None` for any other command or error.
pub(super) fn refused_eval(cmd: &redis::Cmd, code: &str, message: &str) -> Option<Scripting> {
    super::wire::is_script(cmd).then(|| Scripting::of_error(code, message))?
}

/// The refusal of a feature that needs scripts on a server that will not
/// run them: which feature, what the server lacks, that nothing was
/// written, and what runs without scripts.
pub(super) fn refusal(feature: &str, scripting: &Scripting) -> anyhow::Error {
    anyhow::anyhow!(
        "this server {}, and redlock-run's {feature} needs Lua scripts (EVAL): nothing was \
         written; without scripts only a plain lock runs (one KEY, no --limit, no \
         --queue-max, no --queue newest-wins, no Redis Cluster endpoint: \
         docs/compatibility.md; `redlock-run doctor` says which protocol the server gets), \
         or {}",
        scripting.lack(),
        scripting.remedy()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Reply {
        Reply::Text(s.into())
    }

    fn refused(code: &str, message: &str) -> Result<Reply, Failed> {
        Err(Failed::Refused {
            code: code.into(),
            message: message.into(),
        })
    }

    #[test]
    fn eval_replies_say_whether_scripts_run() {
        let cases = [
            (Ok(Reply::Int(1)), Scripting::Works),
            // Redis 7.0 and Valkey: the user's name or "this user".
            (
                refused(
                    "NOPERM",
                    "NOPERM this user has no permissions to run the 'eval' command",
                ),
                Scripting::Denied,
            ),
            (
                refused(
                    "NOPERM",
                    "User default has no permissions to run the 'eval' command",
                ),
                Scripting::Denied,
            ),
            // Redis 6.2 adds the subcommand; redis-rs names the kind.
            (
                refused(
                    "ERR",
                    "NoPerm: this user has no permissions to run the 'eval' command or its \
                     subcommand",
                ),
                Scripting::Denied,
            ),
            // Valkey 9.1 with its Lua module unloaded.
            (
                refused("ERR", "Could not find scripting engine 'lua'"),
                Scripting::Unloaded,
            ),
            (
                refused(
                    "ERR",
                    "ERR unknown command 'EVAL', with args beginning with: ",
                ),
                Scripting::Unknown,
            ),
            // Redis 6.2 quotes with backticks.
            (
                refused(
                    "ERR",
                    "unknown command `EVAL`, with args beginning with: `return 1`",
                ),
                Scripting::Unknown,
            ),
        ];
        for (answer, expected) in cases {
            assert_eq!(Scripting::of(&answer), expected, "{answer:?}");
        }
        assert!(matches!(
            Scripting::of(&Ok(text("1x"))),
            Scripting::Other(_)
        ));
        assert!(matches!(
            Scripting::of(&Err(Failed::Io("connection refused".into()))),
            Scripting::Other(_)
        ));
    }

    #[test]
    fn a_refusal_inside_a_script_or_of_another_command_is_not_a_missing_script() {
        let others = [
            (
                "ERR",
                "ACL failure in script: User u has no permissions to run the 'zcard' command",
            ),
            (
                "ERR",
                "Error running script (call to f_1): @user_script:1: NOPERM 'eval'",
            ),
            (
                "NOPERM",
                "this user has no permissions to run the 'info' command",
            ),
            ("ERR", "unknown command 'DELIFEQ'"),
            ("OOM", "command not allowed when used memory > 'maxmemory'"),
            // EVAL allowed, a declared key not: the rights line's matter.
            ("NOPERM", "No permissions to access a key"),
            (
                "NOPERM",
                "this user has no permissions to access one of the keys used as arguments",
            ),
        ];
        for (code, message) in others {
            assert_eq!(Scripting::of_error(code, message), None, "{message}");
        }
    }

    #[test]
    fn command_info_tells_a_command_from_a_nil() {
        let present = Reply::List(vec![Reply::List(vec![text("delifeq"), Reply::Int(3)])]);
        assert!(command_present(&present));
        assert!(!command_present(&Reply::List(vec![Reply::Nil])));
        assert!(!command_present(&Reply::List(vec![Reply::List(vec![])])));
        assert!(!command_present(&Reply::List(vec![])));
        assert!(!command_present(&text("OK")));
    }

    #[test]
    fn command_docs_tell_whether_set_takes_ifeq() {
        let arg = |token: &str| {
            Reply::Other(vec![
                text("name"),
                text(&token.to_lowercase()),
                text("token"),
                text(token),
            ])
        };
        let set = |args: Vec<Reply>| {
            Reply::List(vec![
                text("set"),
                Reply::Other(vec![
                    text("summary"),
                    text("x"),
                    text("arguments"),
                    Reply::List(args),
                ]),
            ])
        };
        assert!(docs_list_ifeq(&set(vec![arg("NX"), arg("IFEQ")])));
        assert!(!docs_list_ifeq(&set(vec![
            arg("NX"),
            arg("XX"),
            arg("GET")
        ])));
        assert!(!docs_list_ifeq(&Reply::Nil));
    }

    fn found(scripting: Scripting, native: Native) -> Found {
        Found {
            scripting,
            native,
            commands_unknown: None,
        }
    }

    #[test]
    fn the_protocol_follows_what_the_server_allows() {
        let valkey91 = Native {
            ifeq: true,
            delifeq: true,
            delex: false,
            msetex: true,
        };
        let valkey81 = Native {
            ifeq: true,
            ..Native::default()
        };
        let none = Native::default();
        assert_eq!(
            found(Scripting::Works, valkey91).protocol(),
            Protocol::Scripts
        );
        assert_eq!(
            found(Scripting::Denied, valkey91).protocol(),
            Protocol::Native(valkey91)
        );
        assert_eq!(
            found(Scripting::Unloaded, valkey81).protocol(),
            Protocol::Native(valkey81)
        );
        assert_eq!(
            found(Scripting::Denied, none).protocol(),
            Protocol::Transactions
        );
        let why = found(Scripting::Denied, valkey91).reason();
        assert!(
            why.contains("denies EVAL") && why.contains("SET IFEQ, DELIFEQ, MSETEX"),
            "{why}"
        );
        assert_eq!(valkey81.names(), "SET IFEQ");
        assert_eq!(none.names(), "none");
        assert!(Protocol::Native(valkey81).steps().contains("SET IFEQ"));
        assert!(!Protocol::Native(none).steps().contains("SET IFEQ"));
    }

    #[test]
    fn detection_asks_without_writing_and_reads_each_answer() {
        let mut asked = Vec::new();
        let mut ask = |args: &[&str]| -> Result<Reply, Failed> {
            asked.push(args.join(" "));
            match args {
                ["EVAL", ..] => refused("ERR", "Could not find scripting engine 'lua'"),
                ["COMMAND", "INFO", "DELIFEQ"] => {
                    Ok(Reply::List(vec![Reply::List(vec![text("delifeq")])]))
                }
                ["COMMAND", "INFO", _] => Ok(Reply::List(vec![Reply::Nil])),
                _ => Ok(Reply::List(vec![text("IFEQ")])),
            }
        };
        let found = detect(&mut ask);
        assert_eq!(found.scripting, Scripting::Unloaded);
        assert!(found.native.ifeq && found.native.delifeq && !found.native.msetex);
        let writes = ["SET", "DEL", "MSETEX", "DELIFEQ", "EXEC"];
        assert!(asked
            .iter()
            .all(|a| !writes.iter().any(|w| a.starts_with(&format!("{w} ")))));
    }

    #[test]
    fn a_refused_eval_names_the_feature_and_what_the_server_lacks() {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(super::super::scripts::SLOT_ACQUIRE).arg(0);
        let why = refused_eval(
            &cmd,
            "NOPERM",
            "this user has no permissions to run the 'eval' command",
        );
        assert_eq!(why, Some(Scripting::Denied));
        let e = refusal(
            feature_of(super::super::scripts::SLOT_ACQUIRE.as_bytes()),
            &Scripting::Denied,
        );
        let e = e.to_string();
        assert!(
            e.contains("denies EVAL") && e.contains("semaphore (--limit)"),
            "{e}"
        );
        assert!(e.contains("nothing was written"), "{e}");
        let mut get = redis::cmd("GET");
        get.arg("k");
        assert!(refused_eval(&get, "NOPERM", "no permissions to run the 'eval' command").is_none());
        assert!(refused_eval(&cmd, "OOM", "command not allowed").is_none());
    }
}
