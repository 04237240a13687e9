//! A plain lock where EVAL is denied or absent: each script's EVAL, as
//! `calls.rs` built it, read back into the step it stands for ([`Op`]),
//! or refused when the step needs scripts ([`decide`], a pure function);
//! `txn` makes the step with transactions and native compare-and-set,
//! and answers exactly what the script would have (so every reader of a
//! reply stays as it is).
//!
//! The choice is made per connection, by what the server says: the
//! first EVAL it refuses (which writes nothing) has the connection
//! asked which compare-and-set commands it has (`COMMAND INFO`, `COMMAND
//! DOCS SET`: one round trip), and every later script on that connection
//! goes the script-free way at once. A new connection tries scripts
//! again (it may reach another server: a failover, a restart with Lua).
//!
//! What runs without scripts: one KEY with `--limit 1` (not on a Redis
//! Cluster endpoint: a redirect followed by redis-rs would send one
//! command of a transaction alone to another node); acquire (with the
//! holder record and the fence, `--min-hold`, nested runs, Redlock's fence
//! raise), refresh, token-checked release, `status`, `list`,
//! `force-release` (revocation included), `wait KEY`. Waiters keep no
//! line (every release wakes all of them, as with Redlock); `--queue
//! newest-first` then behaves as oldest-first. Refused, before anything is
//! written: a semaphore (`--limit N`), `--queue newest-wins` and
//! `--queue-max` (promises about a line), and any script not listed here.

use std::collections::BTreeMap;

use redis::Value;

use super::error::{Fault, NodeError, NodeResult};
use super::node::Node;
use super::protocol::{self, Native, Protocol, Scripting};
use super::scripts as s;

/// A script's step, read from its ARGV (see the table in `calls.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Op {
    Acquire(Take),
    Extend {
        token: String,
        ttl_ms: String,
        ended_at: Option<String>,
    },
    /// `quiet`: a failed Redlock attempt's give-back, waking nobody;
    /// `anyway`: wake the waiters also where the lock was not ours.
    Release {
        token: String,
        quiet: bool,
        anyway: bool,
    },
    Inspect,
    Force {
        token: Option<String>,
        now: bool,
    },
    RaiseFence {
        token: String,
        fence: String,
    },
    /// LEAVE: no line is kept, nothing to leave.
    Leave,
    /// WAITERS: no line is kept, nobody in it.
    Waiters,
}

/// ACQUIRE's fields that a plain lock without a line needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Take {
    pub token: String,
    pub ttl_ms: String,
    /// The holder record's fields, in the script's order.
    pub record: Vec<(&'static str, String)>,
    pub floor: bool,
    pub screen: bool,
    pub say: bool,
}

/// A script's call's text, KEYS and ARGV (see `wire::script_call`);
/// `None`: not a script's call.
fn parts(cmd: &redis::Cmd) -> Option<(Vec<u8>, Vec<String>, Vec<String>)> {
    let (lua, args) = super::wire::script_call(cmd)?;
    let lua = lua.to_vec();
    let mut args = args.map(|a| String::from_utf8_lossy(a).into_owned());
    let numkeys: usize = args.next()?.parse().ok()?;
    let rest: Vec<String> = args.collect();
    let keys = rest.get(..numkeys)?.to_vec();
    let argv = rest.get(numkeys..)?.to_vec();
    Some((lua, keys, argv))
}

/// The step a script stands for, or the feature refused without scripts.
pub(super) fn decide(lua: &[u8], argv: &[String]) -> Result<Op, &'static str> {
    let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
    let is = |text: &str| text.as_bytes() == lua;
    if is(s::ACQUIRE) {
        return take(argv).map(Op::Acquire);
    }
    if is(s::EXTEND) {
        let ended_at = argv.get(2).cloned();
        let (token, ttl_ms) = (arg(0), arg(1));
        return Ok(Op::Extend {
            token,
            ttl_ms,
            ended_at,
        });
    }
    if is(s::RELEASE) {
        let how = arg(1);
        let (quiet, anyway) = (how == "1", how == "2");
        return Ok(Op::Release {
            token: arg(0),
            quiet,
            anyway,
        });
    }
    let replacing = argv.get(3).is_some_and(|by| !by.is_empty());
    if is(s::FORCE_RELEASE) && replacing {
        return Err("--replace-running (the holder record says who replaced it)");
    }
    if is(s::FORCE_RELEASE) {
        let token = (arg(0) == "1").then(|| arg(1));
        return Ok(Op::Force {
            token,
            now: arg(2) == "1",
        });
    }
    if is(s::RAISE_FENCE) && arg(2) == "1" {
        let (token, fence) = (arg(0), arg(1));
        return Ok(Op::RaiseFence { token, fence });
    }
    match lua {
        _ if is(s::INSPECT) => Ok(Op::Inspect),
        _ if is(s::LEAVE) => Ok(Op::Leave),
        _ if is(s::WAITERS) => Ok(Op::Waiters),
        _ => Err(protocol::feature_of(lua)),
    }
}

/// ACQUIRE without a line: in line ('1' oldest-first, '2' newest-first)
/// or not ('0') are tries alike; newest-wins ('3', '4', '5') and a
/// bounded line (ARGV[18]) are refused.
fn take(argv: &[String]) -> Result<Take, &'static str> {
    let arg = |i: usize| argv.get(i).cloned().unwrap_or_default();
    if !matches!(arg(7).as_str(), "0" | "1" | "2") {
        return Err("--queue newest-wins (it replaces waiters in a line)");
    }
    if !matches!(arg(17).as_str(), "" | "0") {
        return Err("--queue-max (a bounded line of waiters)");
    }
    if !arg(18).is_empty() {
        return Err("hold (a hold's reason and end in its holder record)");
    }
    if arg(19) == "1" {
        return Err("--shared (shared holders, each in a slot of its own)");
    }
    let mut record = vec![("token", arg(0))];
    let names = ["host", "pid", "user", "command", "acquired_at"];
    record.extend(names.iter().zip(2..).map(|(n, i)| (*n, arg(i))));
    record.push(("ttl_ms", arg(1)));
    record.push(("refresh_ms", arg(8)));
    record.push(("kill_after_ms", arg(9)));
    if !arg(15).is_empty() {
        record.push(("label", arg(15)));
    }
    Ok(Take {
        token: arg(0),
        ttl_ms: arg(1),
        record,
        floor: arg(12) == "1",
        screen: arg(13) == "1",
        say: arg(14) == "1",
    })
}

/// What `-v` says of a connection's protocol.
pub(super) fn said(shown: &str, protocol: &Protocol, why: &str) -> String {
    format!(
        "{}: protocol {} ({why}): {}",
        crate::secrets::scrub(shown),
        protocol.name(),
        protocol.steps()
    )
}

/// The keys of the lock in an EVAL's KEYS, by role (see `calls.rs`).
pub(super) struct Keys {
    pub lock: String,
    pub holder: String,
    pub fence: String,
    pub limit: String,
}

impl Keys {
    fn of(keys: &[String]) -> Option<Keys> {
        Some(Keys {
            lock: keys.first()?.clone(),
            holder: keys.get(1)?.clone(),
            fence: keys.get(2)?.clone(),
            limit: keys.get(4)?.clone(),
        })
    }
}

impl Node {
    /// The first EVAL this connection refused (`scripting` says why): ask
    /// which compare-and-set commands it has, then make `cmd`'s step
    /// without scripts (see the module doc).
    pub(super) fn without_scripts(
        &mut self,
        scripting: Scripting,
        cmd: &redis::Cmd,
        slot: Option<u16>,
    ) -> NodeResult<Value> {
        let (native, unknown) = self.native_commands(slot);
        let found = protocol::Found {
            scripting,
            native,
            commands_unknown: unknown,
        };
        let chosen = found.protocol();
        let note = said(self.shown(), &chosen, &found.reason());
        self.set_protocol(chosen, Some(found.scripting), note);
        self.scriptless(cmd, slot)
    }

    /// `COMMAND INFO` and `COMMAND DOCS SET` in one round trip.
    fn native_commands(&mut self, slot: Option<u16>) -> (Native, Option<String>) {
        let asks: [&[&str]; 4] = [
            &["COMMAND", "INFO", "DELIFEQ"],
            &["COMMAND", "INFO", "DELEX"],
            &["COMMAND", "INFO", "MSETEX"],
            &["COMMAND", "DOCS", "SET"],
        ];
        let cmds: Vec<redis::Cmd> = asks.iter().map(|a| command(a)).collect();
        let replies = self.pipeline(&cmds, slot);
        let mut answers: BTreeMap<String, Value> = BTreeMap::new();
        if let Ok(replies) = &replies {
            for (ask, reply) in asks.iter().zip(replies) {
                answers.insert(ask.join(" "), reply.clone());
            }
        }
        let failed = replies.err().map(|e| format!("{:#}", e.error));
        protocol::native(&mut |args: &[&str]| match answers.get(&args.join(" ")) {
            Some(v) => Ok(super::probe::reply(v.clone())),
            None => Err(super::probe::Failed::Io(failed.clone().unwrap_or_default())),
        })
    }

    /// `cmd` (an EVAL of this build's) made without scripts on this
    /// connection, answered as its script would have; a step that needs
    /// scripts is refused, nothing written.
    pub(super) fn scriptless(&mut self, cmd: &redis::Cmd, slot: Option<u16>) -> NodeResult<Value> {
        let refused = |node: &Node, feature: &str| {
            let scripting = node.scripting().unwrap_or(Scripting::Unknown);
            NodeError {
                fault: Fault::Refused,
                error: protocol::refusal(feature, &scripting)
                    .context(crate::secrets::scrub(node.shown())),
            }
        };
        let Some((lua, keys, argv)) = parts(cmd) else {
            return Err(refused(self, "lock"));
        };
        let Some(keys) = Keys::of(&keys) else {
            return Err(refused(self, protocol::feature_of(&lua)));
        };
        let op = decide(&lua, &argv).map_err(|feature| refused(self, feature))?;
        if self.is_cluster() {
            // redis-rs follows a MOVED or an ASK by sending that command
            // alone to another node: a write out of its transaction.
            return Err(refused(self, "lock on a Redis Cluster endpoint"));
        }
        let native = match self.protocol() {
            Some(Protocol::Native(n)) => n,
            _ => Native::default(),
        };
        let slot = slot.unwrap_or_else(|| super::keys::slot(&keys.lock));
        let answer = super::txn::make(self, &keys, &op, native, slot)?;
        answer.map_err(|feature| refused(self, feature))
    }
}

/// A command from its words.
pub(super) fn command(words: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(words[0]);
    cmd.arg(&words[1..]);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(mode: &str, queue_max: &str) -> Vec<String> {
        let mut a: Vec<String> = [
            "tok", "30000", "h", "42", "u", "c", "t0", mode, "10", "5", "1", "60", "1", "1", "0",
            "",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(String::new());
        a.push(queue_max.into());
        a
    }

    #[test]
    fn a_plain_acquire_is_made_and_promises_about_a_line_are_refused() {
        let acquire = s::ACQUIRE.as_bytes();
        for mode in ["0", "1", "2"] {
            let Ok(Op::Acquire(take)) = decide(acquire, &argv(mode, "0")) else {
                panic!("mode {mode} refused");
            };
            assert_eq!(
                (take.token.as_str(), take.ttl_ms.as_str()),
                ("tok", "30000")
            );
            assert!(take.floor && take.screen && !take.say);
            assert!(!take.record.iter().any(|(n, _)| *n == "label"));
            assert_eq!(take.record[1], ("host", "h".to_string()));
            assert_eq!(take.record[5], ("acquired_at", "t0".to_string()));
        }
        for mode in ["3", "4", "5"] {
            let refused = decide(acquire, &argv(mode, "0"));
            assert!(
                matches!(refused, Err(f) if f.contains("newest-wins")),
                "{mode}"
            );
        }
        let refused = decide(acquire, &argv("1", "3"));
        assert!(matches!(refused, Err(f) if f.contains("--queue-max")));
    }

    #[test]
    fn a_semaphore_and_unknown_scripts_are_refused_by_feature() {
        let none: Vec<String> = Vec::new();
        let slot = decide(s::SLOT_ACQUIRE.as_bytes(), &argv("0", "0"));
        assert_eq!(slot, Err("semaphore (--limit)"));
        assert_eq!(
            decide(s::SLOT_EXTEND.as_bytes(), &none),
            Err("semaphore (--limit)")
        );
        let raise = |limit: &str| {
            let a: Vec<String> = vec!["t".into(), "9".into(), limit.into()];
            decide(s::RAISE_FENCE.as_bytes(), &a)
        };
        assert!(matches!(raise("1"), Ok(Op::RaiseFence { .. })));
        assert!(raise("2").is_err());
        assert_eq!(decide(b"return 1", &none), Err("lock"));
    }

    #[test]
    fn holds_shared_runs_and_replacements_are_refused_by_feature() {
        let with = |i: usize, value: &str| {
            let mut a = argv("0", "0");
            a.resize(20, String::new());
            a[i] = value.to_string();
            decide(s::ACQUIRE.as_bytes(), &a)
        };
        assert!(matches!(with(18, ""), Ok(Op::Acquire(_))));
        assert!(with(18, "freeze").is_err_and(|e| e.starts_with("hold")));
        assert!(with(19, "1").is_err_and(|e| e.starts_with("--shared")));
        assert!(matches!(with(19, "2"), Ok(Op::Acquire(_))));
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let replace = decide(s::FORCE_RELEASE.as_bytes(), &words(&["1", "t", "0", "me"]));
        assert!(replace.is_err_and(|e| e.starts_with("--replace-running")));
    }

    #[test]
    fn release_extend_and_force_read_their_arguments() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let release = decide(s::RELEASE.as_bytes(), &words(&["t", "1"]));
        let expected = Op::Release {
            token: "t".into(),
            quiet: true,
            anyway: false,
        };
        assert_eq!(release, Ok(expected));
        let extend = decide(s::EXTEND.as_bytes(), &words(&["t", "300", "e"]));
        assert!(matches!(extend, Ok(Op::Extend { ended_at: Some(e), .. }) if e == "e"));
        let force = decide(s::FORCE_RELEASE.as_bytes(), &words(&["0", "", "1"]));
        assert_eq!(
            force,
            Ok(Op::Force {
                token: None,
                now: true
            })
        );
    }

    #[test]
    fn an_eval_is_read_back_into_its_parts() {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg("lua").arg(2).arg(&["a", "b"]).arg(&["x"]);
        let (lua, keys, argv) = parts(&cmd).expect("an EVAL");
        assert_eq!(
            (lua.as_slice(), keys.len(), argv),
            (&b"lua"[..], 2, vec!["x".into()])
        );
        assert!(parts(&command(&["GET", "k"])).is_none());
    }
}
