//! Reading and deleting locks by hand, for `status`, `list` and
//! `force-release`.

use super::calls::{self, ForceRelease, Inspect};
use super::error::NodeResult;
use super::keys::LockKeys;
use super::node::{Node, Unexpected};
use super::reply::{self, Forced, Inspected};

impl Node {
    /// Read a lock, its holder record and its fence, changing nothing.
    pub fn inspect(&mut self, keys: &LockKeys) -> NodeResult<Inspected> {
        let reply = self.call(keys, &Inspect);
        self.read_inspect(keys, reply)
    }

    /// [`Node::inspect`] as a call in a round (see `fanout`).
    pub(super) fn inspecting(keys: &LockKeys) -> redis::Cmd {
        calls::command(keys, &Inspect)
    }

    /// The reply to [`Node::inspecting`] (a semaphore's INSPECT may ask
    /// for its holders' records first: see `calls.rs`).
    pub(super) fn read_inspect(
        &mut self,
        keys: &LockKeys,
        reply: NodeResult<redis::Value>,
    ) -> NodeResult<Inspected> {
        let reply = self.answer(keys, &Inspect, reply)?;
        reply::inspect(reply).unexpected(self, "inspect")
    }

    /// The call that takes a lock from its holder, whoever it is, or only
    /// if it holds `token`: revoke it (no waiter gets it before the holder
    /// has stopped), or with `now` delete it at once; sent in a round (see
    /// `fanout`), its reply read by [`Node::read_forced`].
    pub(super) fn forcing(keys: &LockKeys, token: Option<&str>, now: bool) -> redis::Cmd {
        calls::command(keys, &ForceRelease { token, now })
    }

    /// The reply to [`Node::forcing`] (a semaphore's may ask for its
    /// holders' records first: see `calls.rs`).
    pub(super) fn read_forced(
        &mut self,
        keys: &LockKeys,
        token: Option<&str>,
        now: bool,
        reply: NodeResult<redis::Value>,
    ) -> NodeResult<(Forced, Inspected)> {
        let reply = self.answer(keys, &ForceRelease { token, now }, reply)?;
        reply::forced(reply).unexpected(self, "force-release")
    }

    /// The names (KEY, not `P{KEY}`) of every lock under `prefix` on this
    /// node, or on every primary of a Cluster.
    pub fn scan_locks(&mut self, prefix: &str) -> NodeResult<Vec<String>> {
        let Some(primaries) = self.primaries()? else {
            return self.scan_here(prefix);
        };
        let mut names = Vec::new();
        for mut primary in primaries {
            names.extend(primary.scan_here(prefix)?);
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The locks on this one server, found with SCAN (KEYS would block
    /// the server): plain locks `P{KEY}` and semaphores `P{KEY}:limit`
    /// (`P}{~KEY}` for a KEY that begins with `}`), all strings. Holder,
    /// fence and holder-set keys never match: the pattern ends with the
    /// closing brace or the `t` of `:limit`. Names that this tool could
    /// not have written are skipped.
    fn scan_here(&mut self, prefix: &str) -> NodeResult<Vec<String>> {
        let pattern = format!("{}[{{}}]*[}}t]", glob_escape(prefix));
        let mut names = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("string");
            let (next, batch): (u64, Vec<Vec<u8>>) = self.query(&cmd)?;
            names.extend(batch.iter().filter_map(|raw| lock_name(prefix, raw)));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// `prefix` as a literal in a SCAN MATCH pattern.
fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// KEY from a scanned `P{KEY}`. KEY may itself hold braces and colons, so
/// strip the ends rather than split. Not UTF-8, empty or with control
/// characters: not written by this tool, skipped.
fn lock_name(prefix: &str, raw: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(raw).ok()?;
    let rest = key.strip_prefix(prefix)?;
    // `P}{~KEY}` is the form of a KEY that begins with `}` (see LockKeys).
    let (inner, moved) = match rest.strip_prefix("}{~") {
        Some(inner) => (inner, true),
        None => (rest.strip_prefix('{')?, false),
    };
    let name = inner
        .strip_suffix('}')
        .or_else(|| inner.strip_suffix("}:limit"))?;
    if name.is_empty()
        || name.chars().any(char::is_control)
        || moved != (name.starts_with('}') && !prefix.contains('{'))
    {
        return None;
    }
    Some(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanned_names_are_parsed_from_the_ends() {
        assert_eq!(lock_name("p:", b"p:{a}").as_deref(), Some("a"));
        assert_eq!(
            lock_name("p:", "p:{x {y}: z ü}".as_bytes()).as_deref(),
            Some("x {y}: z ü")
        );
        assert_eq!(lock_name("p:", b"p:{a}:holder"), None);
        assert_eq!(lock_name("p:", b"p:{a}:fence"), None);
        assert_eq!(lock_name("p:", b"p:{a}:limit").as_deref(), Some("a"));
        assert_eq!(lock_name("p:", b"p:{a}:holders"), None);
        assert_eq!(lock_name("p:", b"p:{a}:holder:1-2"), None);
        assert_eq!(
            lock_name("p:", b"p:{a}:limit}").as_deref(),
            Some("a}:limit")
        );
        assert_eq!(lock_name("p:", b"p:{}"), None);
        assert_eq!(lock_name("p:", b"q:{a}"), None);
        assert_eq!(lock_name("p:", b"p:{a\x01}"), None);
        assert_eq!(lock_name("p:", b"p:{\xff}"), None);
        assert_eq!(lock_name("p:", b"p:}{~}x}").as_deref(), Some("}x"));
        assert_eq!(lock_name("p:", b"p:}{~}x}:limit").as_deref(), Some("}x"));
        assert_eq!(lock_name("p:", b"p:}{~x}"), None);
        assert_eq!(lock_name("p:", b"p:{}x}"), None);
    }

    #[test]
    fn prefixes_are_literal_in_patterns() {
        assert_eq!(glob_escape("redlock:"), "redlock:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
