//! A script's EVAL as it goes on the wire: by the SHA1 digest of its text
//! (`EVALSHA`), 40 bytes instead of the text, which the server would
//! otherwise read and hash again at every call (the acquire's is 20 KB:
//! its EVAL took 0.11-0.12 ms a round trip on loopback, its EVALSHA
//! 0.03-0.04 ms). The text goes only when the server answers
//! `NOSCRIPT`: its first call after a start, a `SCRIPT FLUSH`, a failover
//! (script caches are not replicated) or, from Redis 7.4, an eviction of
//! scripts loaded by EVAL. That EVAL caches it again.
//!
//! A call of this build's scripts is made as its `EVALSHA` ([`call`]):
//! its text is not copied into every command (20 KB, into a buffer grown
//! to 42 KB, at every acquire). Whoever needs the text reads it through
//! [`script_call`] (the script-free protocols, which tell a step by its
//! script) or sends [`whole_form`]; an `EVAL text ..` made elsewhere (a
//! test's) is read and sent alike.

use std::borrow::Cow;

use redis::{Arg, Cmd, Connection, RedisError, Value};

use super::protocol::Scripting;
use super::scripts;

include!(concat!(env!("OUT_DIR"), "/digests.rs"));

/// The call of `lua` with `args` (numkeys, KEYS, ARGV): `EVALSHA digest
/// ..` for a script of this build, else `EVAL lua ..`.
pub(super) fn call(lua: &'static str, args: &[&str]) -> Cmd {
    match digest_of(lua.as_bytes()) {
        Some(digest) => made("EVALSHA", digest.as_bytes(), args),
        None => made("EVAL", lua.as_bytes(), args),
    }
}

/// `name first args..`, its room made at once (the acquire's text is 20
/// KB: grown an argument at a time, a command copied it twice).
fn made<A: AsRef<[u8]>>(name: &str, first: &[u8], args: &[A]) -> Cmd {
    let bytes: usize = args.iter().map(|a| a.as_ref().len()).sum();
    let mut cmd = Cmd::with_capacity(2 + args.len(), name.len() + first.len() + bytes);
    cmd.arg(name).arg(first);
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd
}

/// A script's call as its EVAL would be: the script's text and the
/// arguments after it (numkeys, KEYS, ARGV), whether `cmd` is `EVAL text
/// ..` or the `EVALSHA` of a script of this build; `None` for any other
/// command.
pub(super) fn script_call(cmd: &Cmd) -> Option<(&[u8], impl Iterator<Item = &[u8]>)> {
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(bytes) => bytes,
        _ => &[],
    });
    let (name, first) = (args.next()?, args.next()?);
    let text = match () {
        _ if name.eq_ignore_ascii_case(b"EVAL") => first,
        _ if name.eq_ignore_ascii_case(b"EVALSHA") => text_of(first)?,
        _ => return None,
    };
    Some((text, args))
}

/// `EVALSHA digest numkeys keys.. args..` for `cmd`, a call of a script
/// of this build ([`call`], or its `EVAL`); `None` for any other command
/// (a probe's `EVAL "return 1" 0`, every command not a script's).
pub(super) fn short_form(cmd: &Cmd) -> Option<Cow<'_, Cmd>> {
    let (text, args) = script_call(cmd)?;
    if is_named(cmd, b"EVALSHA") {
        return Some(Cow::Borrowed(cmd));
    }
    let digest = digest_of(text)?;
    Some(Cow::Owned(made(
        "EVALSHA",
        digest.as_bytes(),
        &args.collect::<Vec<_>>(),
    )))
}

/// `cmd` as it goes where the server wants a script's text: the `EVAL`
/// of a call made by its digest, any other command as it is.
pub(super) fn whole_form(cmd: &Cmd) -> Cow<'_, Cmd> {
    match script_call(cmd) {
        Some((text, args)) if is_named(cmd, b"EVALSHA") => {
            Cow::Owned(made("EVAL", text, &args.collect::<Vec<_>>()))
        }
        _ => Cow::Borrowed(cmd),
    }
}

/// Whether `cmd` is a script's call (see [`script_call`]).
pub(super) fn is_script(cmd: &Cmd) -> bool {
    script_call(cmd).is_some()
}

fn is_named(cmd: &Cmd, name: &[u8]) -> bool {
    matches!(cmd.args_iter().next(), Some(Arg::Simple(b)) if b.eq_ignore_ascii_case(name))
}

/// The digest of `text` when it is one of this build's scripts.
fn digest_of(text: &[u8]) -> Option<&'static str> {
    // The script itself (the same memory) first; else its bytes.
    let i = (scripts::ALL.iter())
        .position(|(script, _)| ptr_eq(script.as_bytes(), text))
        .or_else(|| (scripts::ALL.iter()).position(|(script, _)| same(script.as_bytes(), text)))?;
    DIGESTS.get(i).copied()
}

/// The text of the script of this build whose digest is `digest`.
fn text_of(digest: &[u8]) -> Option<&'static [u8]> {
    let i = DIGESTS.iter().position(|d| d.as_bytes() == digest)?;
    scripts::ALL.get(i).map(|(text, _)| text.as_bytes())
}

fn ptr_eq(a: &[u8], b: &[u8]) -> bool {
    std::ptr::eq(a.as_ptr(), b.as_ptr()) && a.len() == b.len()
}

/// `a == b`, eight bytes at a time: the static build's `memcmp` (musl's)
/// goes a byte at a time, and the acquire's text is 20 KB.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (words_a, words_b) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest = words_a.remainder() == words_b.remainder();
    let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().unwrap_or_default());
    rest && words_a.zip(words_b).all(|(x, y)| word(x) == word(y))
}

/// `send` of `cmd`'s short form when it has one (and `allowed`: this
/// node never refused one), then of its whole form where the server
/// wants the text (see [`whole_after`]); else of its whole form.
pub(super) fn by_digest<T>(
    cmd: &Cmd,
    allowed: &mut bool,
    mut send: impl FnMut(&Cmd) -> Result<T, RedisError>,
) -> Result<T, RedisError> {
    if let Some(short) = allowed.then(|| short_form(cmd)).flatten() {
        match send(&short) {
            Err(e) => match whole_after(&e) {
                Some(refused) => *allowed &= !refused,
                None => return Err(e),
            },
            ok => return ok,
        }
    }
    send(&whole_form(cmd))
}

/// The reply to a call sent by [`short_form`] (`short`) or whole: where
/// the server wants the text, it follows on the same connection, and its
/// reply is the answer.
pub(super) fn finish(
    conn: &mut Connection,
    cmd: &Cmd,
    short: bool,
    allowed: &mut bool,
) -> Result<Value, RedisError> {
    match read_reply(conn) {
        Err(e) if short => match whole_after(&e) {
            Some(refused) => {
                *allowed &= !refused;
                conn.send_packed_command(&whole_form(cmd).get_packed_command())?;
                read_reply(conn)
            }
            None => Err(e),
        },
        other => other,
    }
}

/// The next reply on `conn` (pushes skipped); an error reply (a script's
/// error, READONLY, NOSCRIPT) as an `Err`: it is the answer.
fn read_reply(conn: &mut Connection) -> Result<Value, RedisError> {
    loop {
        match conn.recv_response() {
            Ok(Value::Push { .. }) => continue,
            other => return other.and_then(Value::extract_error),
        }
    }
}

/// Whether an EVALSHA's error asks for the script's text: `Some(false)`
/// when the server lacks the script (`NOSCRIPT`), `Some(true)` when it
/// refuses EVALSHA itself (an ACL that grants `+eval` alone, as this
/// tool's documentation did before it sent EVALSHA; a renamed command;
/// no Lua): the EVAL's answer then says whether scripts run, and this
/// node gets no EVALSHA again. `None` for any other error: the answer.
fn whole_after(e: &RedisError) -> Option<bool> {
    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
        return Some(false);
    }
    let code = e.code().unwrap_or_default();
    Scripting::of_error(code, &e.to_string()).map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_eval_goes_by_its_digest_with_the_same_keys_and_arguments() {
        let mut eval = redis::cmd("EVAL");
        eval.arg(scripts::RELEASE)
            .arg(2)
            .arg("k1")
            .arg("k2")
            .arg("tok");
        let short = short_form(&eval).expect("a script of this build");
        let args: Vec<Vec<u8>> = (short.args_iter())
            .map(|a| match a {
                Arg::Simple(b) => b.to_vec(),
                _ => panic!("a simple argument"),
            })
            .collect();
        let digest = digest_of(scripts::RELEASE.as_bytes()).expect("a digest");
        let want: Vec<&[u8]> = vec![b"EVALSHA", digest.as_bytes(), b"2", b"k1", b"k2", b"tok"];
        assert_eq!(args, want);
        // Redis's name for a script: its SHA1 in lower-case hex (whether it
        // is the server's digest of the text, the script-cache test of
        // tests/integration shows).
        assert_eq!(digest.len(), 40);
        assert!(digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    }

    fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
        (cmd.args_iter())
            .map(|a| match a {
                Arg::Simple(b) => b.to_vec(),
                _ => panic!("a simple argument"),
            })
            .collect()
    }

    #[test]
    fn a_call_is_made_by_digest_and_read_or_sent_whole_alike() {
        let called = call(scripts::RELEASE, &["2", "k1", "k2", "tok"]);
        let digest = digest_of(scripts::RELEASE.as_bytes()).expect("a digest");
        let rest: Vec<&[u8]> = vec![b"2", b"k1", b"k2", b"tok"];
        let mut short: Vec<&[u8]> = vec![b"EVALSHA", digest.as_bytes()];
        short.extend(&rest);
        assert_eq!(words(&called), short);
        assert!(matches!(short_form(&called), Some(Cow::Borrowed(_))));
        let mut whole: Vec<&[u8]> = vec![b"EVAL", scripts::RELEASE.as_bytes()];
        whole.extend(&rest);
        assert_eq!(words(&whole_form(&called)), whole);
        // Read the same way in both forms: the text, then the rest.
        for cmd in [&called, &*whole_form(&called)] {
            let (text, args) = script_call(cmd).expect("a script's call");
            assert_eq!(text, scripts::RELEASE.as_bytes());
            assert_eq!(args.collect::<Vec<_>>(), rest);
        }
        // A text that is no script of this build goes as its EVAL.
        let probe = call("return 1", &["0"]);
        assert_eq!(words(&probe), vec![&b"EVAL"[..], b"return 1", b"0"]);
        assert!(matches!(whole_form(&probe), Cow::Borrowed(_)));
        assert!(short_form(&probe).is_none());
        let mut get = redis::cmd("GET");
        get.arg("k");
        assert!(!is_script(&get) && matches!(whole_form(&get), Cow::Borrowed(_)));
    }

    #[test]
    fn other_commands_and_unknown_scripts_go_as_they_are() {
        let mut probe = redis::cmd("EVAL");
        probe.arg("return 1").arg(0);
        assert!(short_form(&probe).is_none());
        let mut get = redis::cmd("GET");
        get.arg(scripts::RELEASE);
        assert!(short_form(&get).is_none());
    }

    /// A server's error line as redis-rs gives it.
    fn error(line: &str) -> RedisError {
        let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).expect("a reply");
        value.extract_error().expect_err("an error reply")
    }

    #[test]
    fn the_text_follows_a_missing_script_or_a_refused_evalsha_only() {
        assert_eq!(
            whole_after(&error("NOSCRIPT No matching script.")),
            Some(false)
        );
        for refused in [
            "NOPERM User redlock has no permissions to run the 'evalsha' command",
            "NOPERM this user has no permissions to run the 'evalsha' command or its subcommand",
            "ERR unknown command 'EVALSHA', with args beginning with: ",
        ] {
            assert_eq!(whole_after(&error(refused)), Some(true), "{refused}");
        }
        for answer in [
            "ERR Error running script (call to f_1): @user_script:1: NOPERM 'evalsha'",
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed when used memory > 'maxmemory'.",
        ] {
            assert_eq!(whole_after(&error(answer)), None, "{answer}");
        }
    }

    #[test]
    fn a_text_one_byte_off_a_script_has_no_digest() {
        let acquire = scripts::ALL[0].0.as_bytes();
        assert!(digest_of(acquire).is_some());
        // The first byte, one in the words, each of the last eight (the
        // remainder of the eight-byte words, whatever the length).
        let n = acquire.len();
        for at in [0, n / 2].into_iter().chain(n - 8..n) {
            let mut text = acquire.to_vec();
            text[at] ^= 1;
            assert!(digest_of(&text).is_none(), "byte {at} of {n}");
        }
        assert!(digest_of(&acquire[..n - 1]).is_none());
    }

    #[test]
    fn every_script_has_a_digest_of_its_own() {
        let mut seen: Vec<&str> = (scripts::ALL.iter())
            .filter_map(|(text, _)| digest_of(text.as_bytes()))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), scripts::ALL.len());
    }
}
