//! A script's EVAL as it goes on the wire: by the SHA1 digest of its text
//! (`EVALSHA`), 40 bytes instead of the text, which the server would
//! otherwise read and hash again at every call (the acquire's is 20 KB:
//! its EVAL took 0.11-0.12 ms a round trip on loopback, its EVALSHA
//! 0.03-0.04 ms). The text goes only when the server answers
//! `NOSCRIPT`: its first call after a start, a `SCRIPT FLUSH`, a failover
//! (script caches are not replicated) or, from Redis 7.4, an eviction of
//! scripts loaded by EVAL. That EVAL caches it again.
//!
//! Everywhere else a call is its EVAL (the script-free protocols read the
//! script's text from it, errors name it): only `node` sends the short
//! form, through [`by_digest`], or [`short_form`] and [`finish`].

use redis::{Arg, Cmd, Connection, RedisError, Value};

use super::protocol::Scripting;
use super::scripts;

include!(concat!(env!("OUT_DIR"), "/digests.rs"));

/// `EVALSHA digest numkeys keys.. args..` for `EVAL text numkeys ..` of
/// a script of this build; `None` for any other command (a probe's
/// `EVAL "return 1" 0`, every command not an EVAL).
pub(super) fn short_form(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter();
    let (Some(Arg::Simple(name)), Some(Arg::Simple(text))) = (args.next(), args.next()) else {
        return None;
    };
    if !name.eq_ignore_ascii_case(b"EVAL") {
        return None;
    }
    let digest = digest_of(text)?;
    let rest = args
        .clone()
        .map(|a| if let Arg::Simple(b) = a { b.len() } else { 0 });
    let mut short = Cmd::with_capacity(2 + rest.clone().count(), 48 + rest.sum::<usize>());
    short.arg("EVALSHA").arg(digest);
    for arg in args {
        match arg {
            Arg::Simple(bytes) => short.arg(bytes),
            _ => return None,
        };
    }
    Some(short)
}

/// The digest of `text` when it is one of this build's scripts.
fn digest_of(text: &[u8]) -> Option<&'static str> {
    let i = (scripts::ALL.iter()).position(|(script, _)| same(script.as_bytes(), text))?;
    DIGESTS.get(i).copied()
}

/// `a == b`, eight bytes at a time: the static build's `memcmp` (musl's)
/// goes a byte at a time, and the acquire's text is 20 KB, compared at
/// every acquire (callgrind: 0.19 of a run's 2.65 million instructions).
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
/// node never refused one), then of `cmd` itself where the server
/// wants the text (see [`whole_after`]); else of `cmd`.
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
    send(cmd)
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
                conn.send_packed_command(&cmd.get_packed_command())?;
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
